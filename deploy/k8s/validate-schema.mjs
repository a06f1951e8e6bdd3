// Offline schema validation of rendered Kubernetes manifests (no cluster, no API server).
//
//   node deploy/k8s/validate-schema.mjs [--self-test] [-v] RENDERED.yaml...
//
// Two passes over every object of every file (multi-document YAML, as `kubectl kustomize`
// prints it):
//
// 1. Schema: the object is validated with its model from the npm package kubernetes-models
//    (built-in kinds, generated from the Kubernetes OpenAPI definitions) or
//    @kubernetes-models/prometheus-operator (ServiceMonitor & co.) or
//    @kubernetes-models/cert-manager (Certificate, Issuer; components/tls), both generated from
//    the projects' own CRDs: types, enums, formats, required fields. An apiVersion/kind without a model is an error, not a skip.
//
// 2. Strict fields: kubernetes-models does not report fields that are not in the schema (the
//    Kubernetes schemas do not say additionalProperties: false, and the API server drops or,
//    with kubectl's default --validate=strict, rejects them). A typo such as
//    `readOnlyRootFileSystem` would pass pass 1 and silently do nothing. The package ships its
//    schemas compiled to JavaScript validators (ajv standalone code), not as JSON, so rather
//    than re-implementing the OpenAPI walk from a second, possibly different copy of the
//    definitions, this pass asks the very same validators which fields they know: the object is
//    validated once more as a tree of Proxies that record, for every JSON object, which property
//    names the validator looks up. A compiled validator looks up every property its schema
//    declares (to check it when present) and enumerates the keys of free-form maps (labels,
//    annotations, ConfigMap data, resources.limits, ...). So, per object: if the validator
//    enumerated its keys it is a map and every key is allowed; otherwise every key it never
//    looked up is not in the schema, and is reported with the known ones. An object the
//    validator never looked into at all (a schema without properties) is reported too, so
//    nothing is accepted unseen. --self-test proves the pass on mutated copies of the input
//    (unknown fields at several depths, wrong types and enums must all be caught; the input
//    itself must pass).
//
// Exit status: 0 all valid, 1 errors found, 2 usage or setup problem.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { parseAllDocuments } from "yaml";

const require = createRequire(import.meta.url);

// ---------------------------------------------------------------------------------------------
// Models

// apiVersion -> module exporting one model class per kind.
function modelModule(apiVersion) {
  const slash = apiVersion.indexOf("/");
  if (slash < 0) return `kubernetes-models/${apiVersion}`; // core group: "v1"
  const group = apiVersion.slice(0, slash);
  if (group === "monitoring.coreos.com")
    return `@kubernetes-models/prometheus-operator/${apiVersion}`;
  if (group === "cert-manager.io") return `@kubernetes-models/cert-manager/${apiVersion}`;
  return `kubernetes-models/${apiVersion}`;
}

function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string")
    throw new Error("apiVersion and kind must be strings");
  let mod;
  try {
    mod = require(modelModule(apiVersion));
  } catch (e) {
    throw new Error(`no schema for apiVersion ${apiVersion} (${e.code || e.message})`);
  }
  const Model = mod[kind];
  if (typeof Model !== "function" || Model.apiVersion !== apiVersion || Model.kind !== kind)
    throw new Error(`no schema for ${apiVersion} ${kind}`);
  return Model;
}

// ---------------------------------------------------------------------------------------------
// Pass 1: schema

function schemaErrors(Model, obj) {
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    if (Array.isArray(e.errors) && e.errors.length)
      return e.errors.map((x) => `${pointerToPath(x.instancePath) || "(object)"}: ${x.message}`);
    return [String(e.message || e)];
  }
}

function pointerToPath(ptr) {
  if (!ptr) return "";
  let out = "";
  for (const raw of ptr.split("/").slice(1)) {
    const seg = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(seg) ? `[${seg}]` : out ? `.${seg}` : seg;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Pass 2: strict fields

function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function joinPath(path, key) {
  if (typeof key === "number") return `${path}[${key}]`;
  const seg = /^[A-Za-z_$][\w$]*$/.test(key) ? key : JSON.stringify(key);
  if (!path) return seg;
  return /^[A-Za-z_$]/.test(seg) ? `${path}.${seg}` : `${path}[${seg}]`;
}

// A copy of `value` in which every plain object is a Proxy recording the validator's lookups.
function track(value, path, records) {
  if (Array.isArray(value)) return value.map((v, i) => track(v, joinPath(path, i), records));
  if (!isPlainObject(value)) return value;
  const rec = { path, keys: Object.keys(value), looked: new Set(), enumerated: false };
  records.push(rec);
  const target = {};
  for (const k of rec.keys) target[k] = track(value[k], joinPath(path, k), records);
  return new Proxy(target, {
    get(t, prop, receiver) {
      if (typeof prop === "string") rec.looked.add(prop);
      return Reflect.get(t, prop, receiver);
    },
    has(t, prop) {
      if (typeof prop === "string") rec.looked.add(prop);
      return Reflect.has(t, prop);
    },
    getOwnPropertyDescriptor(t, prop) {
      if (typeof prop === "string") rec.looked.add(prop);
      return Reflect.getOwnPropertyDescriptor(t, prop);
    },
    ownKeys(t) {
      rec.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

function unknownFields(Model, obj) {
  const records = [];
  const tracked = track(obj, "", records);
  try {
    // The model's validate() runs the compiled schema on `this`: here, the tracked copy.
    Model.prototype.validate.call(tracked);
  } catch {
    // Schema errors are pass 1's to report; the lookups made are what counts here.
  }
  const errors = [];
  for (const rec of records) {
    if (rec.enumerated || rec.keys.length === 0) continue;
    const where = rec.path || "(top level)";
    if (rec.looked.size === 0) {
      errors.push(`${where}: not looked at by the schema: ${rec.keys.join(", ")}`);
      continue;
    }
    const known = [...rec.looked].filter((k) => k !== "constructor" && k !== "toJSON").sort();
    for (const k of rec.keys) {
      if (rec.looked.has(k)) continue;
      const near = known.find((x) => x.toLowerCase() === k.toLowerCase());
      errors.push(
        `${joinPath(rec.path, k)}: unknown field` +
          (near ? ` (did you mean ${near}?)` : "") +
          `; known here: ${known.join(", ")}`,
      );
    }
  }
  return errors;
}

// ---------------------------------------------------------------------------------------------
// Documents

function loadDocuments(file) {
  const text = readFileSync(file, "utf8");
  const docs = [];
  for (const doc of parseAllDocuments(text, { uniqueKeys: true })) {
    if (doc.errors.length) throw new Error(doc.errors.map((e) => e.message).join("; "));
    const obj = doc.toJS({ maxAliasCount: 0 });
    if (obj === null || obj === undefined) continue; // empty document
    docs.push(obj);
  }
  return docs;
}

function describe(obj) {
  const ns = obj?.metadata?.namespace ? `${obj.metadata.namespace}/` : "";
  return `${obj?.kind ?? "?"} ${ns}${obj?.metadata?.name ?? "?"}`;
}

function checkObject(obj) {
  if (!isPlainObject(obj)) return { schema: ["document is not a mapping"], strict: [] };
  let Model;
  try {
    Model = modelFor(obj.apiVersion, obj.kind);
  } catch (e) {
    return { schema: [e.message], strict: [] };
  }
  return { schema: schemaErrors(Model, obj), strict: unknownFields(Model, obj) };
}

// ---------------------------------------------------------------------------------------------
// Self-test: mutations of the real input that each pass must catch.

const clone = (o) => JSON.parse(JSON.stringify(o));

// [description, kind, pass that must catch it, function mutating the object (false = n/a)]
const MUTATIONS = [
  ["unknown top-level field", "*", "strict", (o) => ((o.spc = {}), true)],
  ["unknown metadata field", "*", "strict", (o) => ((o.metadata.lables = { a: "b" }), true)],
  ["unknown StatefulSet spec field", "StatefulSet", "strict", (o) => ((o.spec.replica = 3), true)],
  ["misspelt securityContext field", "StatefulSet", "strict",
    (o) => ((o.spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem = true),
      true)],
  ["unknown probe field", "StatefulSet", "strict",
    (o) => ((o.spec.template.spec.containers[0].readinessProbe.httpGet.paht = "/readyz"), true)],
  ["unknown env source field", "StatefulSet", "strict",
    (o) => {
      // The first entry with a source (an overlay's patch may put a plain value first).
      const e = o.spec.template.spec.containers[0].env.find((x) => x.valueFrom);
      return e ? ((e.valueFrom.fieldref = {}), true) : false;
    }],
  ["unknown volumeClaimTemplate field", "StatefulSet", "strict",
    (o) => ((o.spec.volumeClaimTemplates[0].spec.storageclassName = "x"), true)],
  ["unknown pod-level field", "StatefulSet", "strict",
    (o) => ((o.spec.template.spec.terminationGracePeriod = 30), true)],
  ["replicas as a string", "StatefulSet", "schema", (o) => ((o.spec.replicas = "3"), true)],
  ["bad podManagementPolicy", "StatefulSet", "schema",
    (o) => ((o.spec.podManagementPolicy = "parallel"), true)],
  ["containerPort as a string", "StatefulSet", "schema",
    (o) => ((o.spec.template.spec.containers[0].ports[0].containerPort = "8080"), true)],
  ["missing container image name", "StatefulSet", "schema",
    (o) => (delete o.spec.template.spec.containers[0].name, true)],
  ["unknown Deployment strategy field", "Deployment", "strict",
    (o) => ((o.spec.strategy.rollingUpdate.maxSurg = 1), true)],
  ["unknown Deployment configMapKeyRef field", "Deployment", "strict",
    (o) => {
      const e = o.spec.template.spec.containers[0].env.find((x) => x.valueFrom?.configMapKeyRef);
      return e ? ((e.valueFrom.configMapKeyRef.keys = "endpoints"), true) : false;
    }],
  ["unknown emptyDir field", "Deployment", "strict",
    (o) => {
      const v = o.spec.template.spec.volumes.find((x) => x.emptyDir);
      return v ? ((v.emptyDir.size = "1Gi"), true) : false;
    }],
  ["bad Deployment strategy type", "Deployment", "schema",
    (o) => ((o.spec.strategy.type = "Rolling"), true)],
  ["unknown HPA metric field", "HorizontalPodAutoscaler", "strict",
    (o) => {
      const m = o.spec.metrics.find((x) => x.resource);
      return m ? ((m.resource.target.averageUtilisation = 70), true) : false;
    }],
  ["unknown HPA Pods metric field", "HorizontalPodAutoscaler", "strict",
    (o) => {
      const m = o.spec.metrics.find((x) => x.pods);
      return m ? ((m.pods.metric.nmae = m.pods.metric.name), true) : false;
    }],
  ["HPA Pods metric without a target", "HorizontalPodAutoscaler", "schema",
    (o) => {
      const m = o.spec.metrics.find((x) => x.pods);
      return m ? (delete m.pods.target, true) : false;
    }],
  ["unknown HPA scaleUp policy field", "HorizontalPodAutoscaler", "strict",
    (o) => (o.spec.behavior.scaleUp?.policies?.length
      ? ((o.spec.behavior.scaleUp.policies[0].periodSecond = 30), true) : false)],
  ["unknown topologySpreadConstraint field", "Deployment", "strict",
    (o) => {
      const t = o.spec.template.spec.topologySpreadConstraints;
      return t?.length ? ((t[0].whenUnsatisfied = "ScheduleAnyway"), true) : false;
    }],
  ["topologySpreadConstraint without topologyKey", "Deployment", "schema",
    (o) => {
      const t = o.spec.template.spec.topologySpreadConstraints;
      return t?.length ? (delete t[0].topologyKey, true) : false;
    }],
  ["topologySpreadConstraint maxSkew as a string", "Deployment", "schema",
    (o) => {
      const t = o.spec.template.spec.topologySpreadConstraints;
      return t?.length ? ((t[0].maxSkew = "1"), true) : false;
    }],
  ["unknown HPA behavior field", "HorizontalPodAutoscaler", "strict",
    (o) => ((o.spec.behavior.scaleDown.stabilizationWindow = 300), true)],
  ["HPA maxReplicas as a string", "HorizontalPodAutoscaler", "schema",
    (o) => ((o.spec.maxReplicas = "31"), true)],
  ["HPA without maxReplicas", "HorizontalPodAutoscaler", "schema",
    (o) => (delete o.spec.maxReplicas, true)],
  ["unknown Service port field", "Service", "strict",
    (o) => ((o.spec.ports[0].targetport = 8080), true)],
  ["bad Service type", "Service", "schema", (o) => ((o.spec.type = "Headless"), true)],
  ["unknown PDB field", "PodDisruptionBudget", "strict", (o) => ((o.spec.maxUnavailble = 1), true)],
  ["unknown ConfigMap field", "ConfigMap", "strict", (o) => ((o.datas = {}), true)],
  ["unknown NetworkPolicy rule field", "NetworkPolicy", "strict",
    (o) => ((o.spec.ingress[0].form = []), true)],
  ["bad NetworkPolicy policyType", "NetworkPolicy", "schema",
    (o) => ((o.spec.policyTypes = "Ingress"), true)],
  ["unknown ServiceMonitor endpoint field", "ServiceMonitor", "strict",
    (o) => ((o.spec.endpoints[0].scrapeIntervall = "30s"), true)],
  ["bad ServiceMonitor interval", "ServiceMonitor", "schema",
    (o) => ((o.spec.endpoints[0].interval = "30 seconds"), true)],
  ["unknown ServiceMonitor tlsConfig field", "ServiceMonitor", "strict",
    (o) => (o.spec.endpoints[0].tlsConfig
      ? ((o.spec.endpoints[0].tlsConfig.servername = "x"), true) : false)],
  ["unknown Certificate privateKey field", "Certificate", "strict",
    (o) => ((o.spec.privateKey = { ...o.spec.privateKey, rotationpolicy: "Always" }), true)],
  ["unknown Certificate spec field", "Certificate", "strict",
    (o) => ((o.spec.renewbefore = "720h"), true)],
  ["bad Certificate rotationPolicy", "Certificate", "schema",
    (o) => ((o.spec.privateKey = { ...o.spec.privateKey, rotationPolicy: "Sometimes" }), true)],
  ["bad Certificate usage", "Certificate", "schema",
    (o) => ((o.spec.usages = ["server-auth"]), true)],
  ["Certificate without secretName", "Certificate", "schema",
    (o) => (delete o.spec.secretName, true)],
  ["Certificate dnsNames as a string", "Certificate", "schema",
    (o) => ((o.spec.dnsNames = "snowflaked"), true)],
  ["unknown Issuer field", "Issuer", "strict", (o) => ((o.spec.selfsigned = {}), true)],
  ["unknown secret volume field", "StatefulSet", "strict",
    (o) => {
      const v = o.spec.template.spec.volumes.find((x) => x.secret);
      return v ? ((v.secret.secretname = "x"), true) : false;
    }],
];

function selfTest(docs) {
  let failures = 0;
  let ran = 0;
  for (const [what, kind, pass, mutate] of MUTATIONS) {
    const targets = docs.filter((d) => kind === "*" || d.kind === kind);
    if (!targets.length) continue;
    for (const original of kind === "*" ? targets : targets.slice(0, 1)) {
      const copy = clone(original);
      if (!mutate(copy)) continue;
      ran++;
      const res = checkObject(copy);
      if (res[pass].length === 0) {
        failures++;
        console.error(
          `self-test FAILED: ${what} in ${describe(original)} not caught by the ${pass} pass`,
        );
      }
    }
  }
  console.log(`self-test: ${ran - failures} of ${ran} mutations caught`);
  return failures === 0 && ran > 0;
}

// ---------------------------------------------------------------------------------------------

function main(argv) {
  const files = [];
  let doSelfTest = false;
  let verbose = false;
  for (const a of argv) {
    if (a === "--self-test") doSelfTest = true;
    else if (a === "-v" || a === "--verbose") verbose = true;
    else if (a.startsWith("-")) {
      console.error(`validate-schema: unknown option ${a}`);
      return 2;
    } else files.push(a);
  }
  if (!files.length) {
    console.error("usage: node validate-schema.mjs [--self-test] [-v] RENDERED.yaml...");
    return 2;
  }
  let bad = 0;
  let total = 0;
  const all = [];
  for (const file of files) {
    let docs;
    try {
      docs = loadDocuments(file);
    } catch (e) {
      console.error(`${file}: ${e.message}`);
      bad++;
      continue;
    }
    if (!docs.length) {
      console.error(`${file}: no objects`);
      bad++;
    }
    for (const obj of docs) {
      total++;
      all.push(obj);
      const { schema, strict } = checkObject(obj);
      for (const e of schema) console.error(`${file}: ${describe(obj)}: schema: ${e}`);
      for (const e of strict) console.error(`${file}: ${describe(obj)}: strict: ${e}`);
      if (schema.length || strict.length) bad++;
      else if (verbose) console.log(`${file}: ${describe(obj)}: ok (${obj.apiVersion})`);
    }
  }
  console.log(
    `schema: ${total - bad} of ${total} objects valid (kubernetes-models, unknown fields rejected)`,
  );
  if (doSelfTest && !selfTest(all)) return 1;
  return bad ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));
