// Independent judges of snowflaked's UUIDv7, ULID and TypeID output: the npm packages `uuid`
// (RFC 9562), `ulid` (the ULID spec's reference implementation) and `typeid-js` (the TypeID spec's
// JavaScript implementation, by its authors), pinned by package-lock.json and installed by
// install.sh. Nothing here shares code with the daemon; the checks are what those libraries
// say about our texts, plus the RFC's own field positions read from the bytes `uuid.parse` gives.
//
// Usage:
//   node judge.mjs < records.jsonl   one JSON object per line (below); prints one line per failed
//                                    check and a summary; exit 0 when every check passed, 1 when
//                                    any failed (or the input was empty or malformed), 2 on usage.
//   node judge.mjs --self-test       known vectors must pass and deliberately wrong inputs must
//                                    each fail the check named for them (the judge can fail).
//
// Records ("label" is optional everywhere and names the record in failure lines):
//   {"kind":"uuid7","text":"<36-char UUID>","timestamp_ms":N,"counter":N,"hex":"<32 hex digits>"}
//       uuid.validate(text); uuid.version(text) === 7; uuid.parse(text) bytes === hex;
//       uuid.stringify(uuid.parse(text)) === text (so text is canonical lowercase); the RFC 9562
//       unix_ts_ms (bytes 0-5) === timestamp_ms; rand_a (12 bits of bytes 6-7) === counter when
//       given; variant bits (byte 8) === 0b10.
//   {"kind":"ulid","text":"<26-char ULID>","timestamp_ms":N,"uuid":"<36-char UUID>"}
//       ulid.isValid(text); ulid.decodeTime(text) === timestamp_ms; ulid.ulidToUUID(text) equals
//       uuid (case-insensitive); ulid.uuidToULID(ulid.ulidToUUID(text)) === text (so text is the
//       canonical uppercase form). With "uuid_version":7 (a UUIDv7 sent in base32) also
//       uuid.version(that UUID) === 7.
//   {"kind":"typeid","text":"<prefix>_<26 chars>","prefix":"<prefix>","uuid":"<36-char UUID>",
//    "timestamp_ms":N,"counter":N}
//       TypeID.fromString(text) and fromString(text, prefix) accept it; getType() === prefix;
//       toString() === text; toUUID() === uuid; TypeID.fromUUID(prefix, uuid).toString() === text
//       (typeid-js encodes our UUID as we do); then, by the npm `uuid` package on toUUID():
//       validate, version === 7, parse() bytes === toUUIDBytes(), unix_ts_ms (bytes 0-5) ===
//       timestamp_ms, rand_a === counter when given, variant 10.
//   {"kind":"order","texts":["...", ...]}
//       a JavaScript string sort of the texts equals their order (issue order) and no text repeats.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { parse, stringify, validate, version } from "uuid";
import { decodeTime, isValid, ulidToUUID, uuidToULID } from "ulid";
import { TypeID } from "typeid-js";

// Runs fn and returns its value, or an Error when it throws (the libraries throw on bad input).
function attempt(fn) {
    try {
        return fn();
    } catch (e) {
        return e instanceof Error ? e : new Error(String(e));
    }
}

function show(v) {
    return v instanceof Error ? `threw ${v.message}` : JSON.stringify(v);
}

function hexOf(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// RFC 9562 5.7 read from the 16 bytes of a UUIDv7: unix_ts_ms = bytes 0-5 (48 bits, exact in a
// double), ver = high nibble of byte 6, rand_a = the 12 bits after it (our counter), var = top two
// bits of byte 8; against the daemon's timestamp_ms and counter (when given).
function rfc9562Fields(check, bytes, rec) {
    const ms = bytes.slice(0, 6).reduce((acc, b) => acc * 256 + b, 0);
    check("unix_ts_ms (bytes 0-5)", ms === rec.timestamp_ms, `bytes say ${ms}, ours ${show(rec.timestamp_ms)}`);
    if (rec.counter !== undefined) {
        const randA = ((bytes[6] & 0x0f) << 8) | bytes[7];
        check("rand_a counter (bytes 6-7)", randA === rec.counter, `bytes say ${randA}, ours ${show(rec.counter)}`);
    }
    check("variant 10 (byte 8)", bytes[8] >> 6 === 2, `byte 8 = 0x${bytes[8].toString(16)}`);
}

// One record's checks; returns [checksRun, failures] where each failure is {check, detail}.
function judgeRecord(rec) {
    const failures = [];
    let checks = 0;
    const check = (name, ok, detail) => {
        checks++;
        if (!ok) failures.push({ check: name, detail });
    };
    if (rec === null || typeof rec !== "object") {
        check("record", false, "not a JSON object");
        return [checks, failures];
    }
    switch (rec.kind) {
        case "uuid7": {
            const text = rec.text;
            check("uuid.validate", validate(text) === true, `validate(${show(text)}) is false`);
            const ver = attempt(() => version(text));
            check("uuid.version", ver === 7, `version(${show(text)}) = ${show(ver)}, want 7`);
            const bytes = attempt(() => parse(text));
            if (bytes instanceof Error) {
                check("uuid.parse", false, `parse(${show(text)}) ${show(bytes)}`);
                break;
            }
            const hex = hexOf(bytes);
            check("uuid.parse bytes", hex === rec.hex, `parse(${show(text)}) = ${hex}, ours ${show(rec.hex)}`);
            const back = attempt(() => stringify(bytes));
            check("uuid.stringify(parse(text))", back === text, `${show(back)} != ${show(text)}`);
            rfc9562Fields(check, bytes, rec);
            break;
        }
        case "typeid": {
            const text = rec.text;
            const t = attempt(() => TypeID.fromString(text));
            if (t instanceof Error) {
                check("typeid.fromString", false, `fromString(${show(text)}) ${show(t)}`);
                break;
            }
            const typed = attempt(() => TypeID.fromString(text, rec.prefix));
            check("typeid.fromString(text, prefix)", !(typed instanceof Error), `fromString(${show(text)}, ${show(rec.prefix)}) ${show(typed)}`);
            check("typeid.getType", t.getType() === rec.prefix, `getType() = ${show(t.getType())}, ours ${show(rec.prefix)}`);
            check("typeid.toString", t.toString() === text, `toString() = ${show(t.toString())}`);
            const u = attempt(() => t.toUUID());
            check("typeid.toUUID", u === rec.uuid, `toUUID(${show(text)}) = ${show(u)}, ours ${show(rec.uuid)}`);
            const enc = attempt(() => TypeID.fromUUID(rec.prefix, rec.uuid).toString());
            check("typeid.fromUUID(prefix, uuid)", enc === text, `fromUUID(${show(rec.prefix)}, ${show(rec.uuid)}) = ${show(enc)}, ours ${show(text)}`);
            // The embedded UUID, judged by the npm uuid package as a UUIDv7.
            check("uuid.validate(typeid.toUUID(text))", validate(u) === true, `validate(${show(u)}) is false`);
            const ver = attempt(() => version(u));
            check("uuid.version(typeid.toUUID(text))", ver === 7, `version(${show(u)}) = ${show(ver)}, want 7`);
            const bytes = attempt(() => parse(u));
            if (bytes instanceof Error) {
                check("uuid.parse(typeid.toUUID(text))", false, `parse(${show(u)}) ${show(bytes)}`);
                break;
            }
            const tb = attempt(() => t.toUUIDBytes());
            check("typeid.toUUIDBytes = uuid.parse bytes", !(tb instanceof Error) && hexOf(tb) === hexOf(bytes), `${show(tb instanceof Error ? tb : hexOf(tb))} != ${hexOf(bytes)}`);
            rfc9562Fields(check, bytes, rec);
            break;
        }
        case "ulid": {
            const text = rec.text;
            check("ulid.isValid", isValid(text) === true, `isValid(${show(text)}) is false`);
            const t = attempt(() => decodeTime(text));
            check("ulid.decodeTime", t === rec.timestamp_ms, `decodeTime(${show(text)}) = ${show(t)}, ours ${show(rec.timestamp_ms)}`);
            const u = attempt(() => ulidToUUID(text));
            const same = !(u instanceof Error) && typeof rec.uuid === "string" && u.toLowerCase() === rec.uuid.toLowerCase();
            check("ulid.ulidToUUID", same, `ulidToUUID(${show(text)}) = ${show(u)}, ours ${show(rec.uuid)}`);
            const back = u instanceof Error ? u : attempt(() => uuidToULID(u));
            check("ulid.uuidToULID(ulidToUUID(text))", back === text, `${show(back)} != ${show(text)}`);
            if (rec.uuid_version !== undefined) {
                const ver = u instanceof Error ? u : attempt(() => version(u.toLowerCase()));
                check("uuid.version(ulidToUUID(text))", ver === rec.uuid_version, `${show(ver)}, want ${rec.uuid_version}`);
            }
            break;
        }
        case "order": {
            const texts = rec.texts;
            if (!Array.isArray(texts) || texts.length < 2 || !texts.every((s) => typeof s === "string")) {
                check("order", false, "texts must be an array of at least 2 strings");
                break;
            }
            const sorted = [...texts].sort();
            const at = texts.findIndex((s, i) => s !== sorted[i]);
            check("JS sort = issue order", at < 0, at < 0 ? "" : `position ${at}: issued ${texts[at]}, sorts ${sorted[at]}`);
            const dup = texts.findIndex((s, i) => i > 0 && s === texts[i - 1]);
            check("no repeats", dup < 0, dup < 0 ? "" : `position ${dup} repeats ${texts[dup]}`);
            break;
        }
        default:
            check("record", false, `unknown kind ${show(rec.kind)}`);
    }
    return [checks, failures];
}

function describe(rec, index) {
    if (rec && typeof rec === "object" && rec.label) return rec.label;
    const text = rec && typeof rec === "object" ? rec.text ?? (Array.isArray(rec.texts) ? `${rec.texts.length} texts` : "") : "";
    return `#${index + 1} ${rec && rec.kind ? rec.kind : "?"} ${text}`.trimEnd();
}

// Judges an array of records, printing each failure; returns the number of failures.
function judgeAll(records, out, malformed = 0) {
    let checks = 0;
    let failed = malformed;
    const kinds = {};
    records.forEach((rec, i) => {
        const [n, failures] = judgeRecord(rec);
        checks += n;
        if (rec && rec.kind) kinds[rec.kind] = (kinds[rec.kind] || 0) + 1;
        for (const f of failures) {
            failed++;
            out(`FAIL ${describe(rec, i)}: ${f.check}: ${f.detail}`);
        }
    });
    if (records.length === 0 && malformed === 0) {
        failed++;
        out("FAIL input: no records (nothing was judged)");
    }
    const per = Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(", ");
    out(`judge: ${records.length} records (${per || "none"}), ${checks} checks, ${failed} failures` +
        ` [${versions()}]`);
    return failed;
}

function versions() {
    return `uuid ${pkgVersion("uuid")}, ulid ${pkgVersion("ulid")}, typeid-js ${pkgVersion("typeid-js")},` +
        ` node ${process.versions.node}`;
}

function pkgVersion(name) {
    return attempt(() => requireJson(`./node_modules/${name}/package.json`).version);
}

function requireJson(rel) {
    return JSON.parse(readFileSync(new URL(rel, import.meta.url), "utf8"));
}

// ---- self-test --------------------------------------------------------------------------------

const RFC_A6 = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"; // RFC 9562 A.6, 2022-02-22T19:22:22Z
const RFC_A6_MS = 1645557742000;
const RFC_A6_HEX = "017f22e279b07cc398c4dc0c0c07398f";
const SPEC_ULID = "01ARYZ6S41TSV4RRFFQ69G5FAV"; // the ulid spec's README example
const SPEC_ULID_MS = 1469918176385;
const SPEC_ULID_UUID = "01563df3-6481-d676-4c61-efb99302bd5b"; // the same 128 bits
const a6 = { kind: "uuid7", text: RFC_A6, timestamp_ms: RFC_A6_MS, counter: 0xcc3, hex: RFC_A6_HEX };
// The TypeID spec's valid.yml "valid-uuidv7": ms 0x01890a5dac96, rand_a 0x74b.
const specTypeid = {
    kind: "typeid", text: "prefix_01h455vb4pex5vsknk084sn02q", prefix: "prefix",
    uuid: "01890a5d-ac96-774b-bcce-b302099a8057", timestamp_ms: 1688096058518, counter: 0x74b,
};
const SPEC_SUFFIX = "01h455vb4pex5vsknk084sn02q";
const specUlid = { kind: "ulid", text: SPEC_ULID, timestamp_ms: SPEC_ULID_MS, uuid: SPEC_ULID_UUID };

const GOOD = [
    a6,
    specUlid,
    { ...specUlid, uuid: SPEC_ULID_UUID.toUpperCase() }, // ulidToUUID's own (upper) case
    { kind: "ulid", text: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", timestamp_ms: 2 ** 48 - 1, uuid: "ffffffff-ffff-ffff-ffff-ffffffffffff" },
    // RFC A.6 in base32 (what /uuid?encoding=base32 sends): a UUIDv7 the ulid judge reads.
    { kind: "ulid", text: "01FWHE4YDGFK1SHH6W1G60EECF", timestamp_ms: RFC_A6_MS, uuid: RFC_A6, uuid_version: 7 },
    { kind: "order", texts: ["017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "017f22e2-79b0-7cc4-8000-000000000000", "017f22e2-79b1-7000-8000-000000000000"] },
    { kind: "order", texts: ["01ARYZ6S41TSV4RRFFQ69G5FAV", "01ARYZ6S41TSV4RRFFQ69G5FAW", "01ARYZ6S420000000000000000"] },
    specTypeid,
    { ...specTypeid, text: "pre_fix_" + SPEC_SUFFIX, prefix: "pre_fix" }, // v0.3: "_" inside
    { ...specTypeid, text: SPEC_SUFFIX, prefix: "" }, // no prefix, no separator
    { kind: "order", texts: ["user_01h455vb4pex5vsknk084sn02q", "user_01h455vb4pex5vsknk084sn02r", "user_01h455vb4pex5vsknk084sn030"] },
];

// Each wrong input must fail, and fail (at least) the check named here.
const BAD = [
    [{ ...a6, timestamp_ms: RFC_A6_MS + 1 }, "unix_ts_ms (bytes 0-5)"],
    [{ ...a6, counter: 0xcc4 }, "rand_a counter (bytes 6-7)"],
    [{ ...a6, hex: "017f22e279b07cc398c4dc0c0c07398e" }, "uuid.parse bytes"],
    [{ ...a6, text: RFC_A6.toUpperCase(), hex: RFC_A6_HEX }, "uuid.stringify(parse(text))"],
    [{ ...a6, text: "919108f7-52d1-4320-9bac-f847db4148a8" }, "uuid.version"], // RFC 9562 A.3, a v4
    [{ ...a6, text: "017f22e2-79b0-7cc3-c8c4-dc0c0c07398f" }, "uuid.validate"], // variant 110
    [{ ...a6, text: RFC_A6_HEX }, "uuid.validate"], // compact hex is not the canonical text
    [{ ...a6, text: RFC_A6.slice(0, 35) }, "uuid.validate"],
    [{ ...specUlid, timestamp_ms: SPEC_ULID_MS - 1 }, "ulid.decodeTime"],
    [{ ...specUlid, uuid: "01563df3-6481-d676-4c61-efb99302bd5c" }, "ulid.ulidToUUID"],
    [{ ...specUlid, text: SPEC_ULID.toLowerCase() }, "ulid.uuidToULID(ulidToUUID(text))"],
    [{ ...specUlid, text: "01ARYZ6S41TSV4RRFFQ69G5FAU" }, "ulid.isValid"], // U is not Crockford
    [{ ...specUlid, text: "01ARYZ6S41TSV4RRFFQ69G5FA" }, "ulid.isValid"],
    [{ ...specUlid, text: "8ZZZZZZZZZZZZZZZZZZZZZZZZZ" }, "ulid.decodeTime"], // past 2^48-1 ms
    [{ kind: "ulid", text: SPEC_ULID, timestamp_ms: SPEC_ULID_MS, uuid: SPEC_ULID_UUID, uuid_version: 7 }, "uuid.version(ulidToUUID(text))"],
    [{ kind: "order", texts: ["01ARYZ6S41TSV4RRFFQ69G5FAW", "01ARYZ6S41TSV4RRFFQ69G5FAV"] }, "JS sort = issue order"],
    [{ kind: "order", texts: [RFC_A6, RFC_A6] }, "no repeats"],
    // A number-looking difference that numeric order would accept and string order does not.
    [{ kind: "order", texts: ["9", "10"] }, "JS sort = issue order"],
    [{ kind: "order", texts: [RFC_A6] }, "order"],
    [{ kind: "uuid4", text: RFC_A6 }, "record"],
    [{ ...specTypeid, prefix: "user" }, "typeid.getType"],
    [{ ...specTypeid, prefix: "user" }, "typeid.fromString(text, prefix)"],
    [{ ...specTypeid, uuid: "01890a5d-ac96-774b-bcce-b302099a8058" }, "typeid.toUUID"],
    [{ ...specTypeid, uuid: "01890a5d-ac96-774b-bcce-b302099a8058" }, "typeid.fromUUID(prefix, uuid)"],
    [{ ...specTypeid, timestamp_ms: 1688096058519 }, "unix_ts_ms (bytes 0-5)"],
    [{ ...specTypeid, counter: 0x74c }, "rand_a counter (bytes 6-7)"],
    [{ ...specTypeid, text: "prefix_" + SPEC_SUFFIX.toUpperCase() }, "typeid.fromString"],
    [{ ...specTypeid, text: "prefix__" + SPEC_SUFFIX, prefix: "prefix_" }, "typeid.fromString"], // "_" at the end
    [{ ...specTypeid, text: "_" + SPEC_SUFFIX, prefix: "" }, "typeid.fromString"], // separator, no prefix
    [{ ...specTypeid, text: "prefix_8" + SPEC_SUFFIX.slice(1) }, "typeid.fromString"], // > 128 bits
    // RFC 9562 A.3, a UUIDv4, and RFC A.6 with variant 110: TypeIDs, not of UUIDv7s.
    [{ ...specTypeid, text: "prefix_4hj44femph8cg9qb7r8zdm2j58", uuid: "919108f7-52d1-4320-9bac-f847db4148a8" }, "uuid.version(typeid.toUUID(text))"],
    [{ ...specTypeid, text: "prefix_01fwhe4ydgfk1whh6w1g60eecf", uuid: "017f22e2-79b0-7cc3-c8c4-dc0c0c07398f" }, "uuid.validate(typeid.toUUID(text))"],
    [{ kind: "order", texts: ["user_01h455vb4pex5vsknk084sn02r", "user_01h455vb4pex5vsknk084sn02q"] }, "JS sort = issue order"],
];

function selfTest() {
    let problems = 0;
    const quiet = () => {};
    if (judgeAll(GOOD, quiet) !== 0) {
        judgeAll(GOOD, (line) => console.log(`  ${line}`));
        console.log("SELF-TEST FAIL: known-good vectors were rejected (above)");
        problems++;
    }
    for (const [rec, want] of BAD) {
        const [, failures] = judgeRecord(rec);
        if (!failures.some((f) => f.check === want)) {
            console.log(`SELF-TEST FAIL: ${JSON.stringify(rec)} should fail "${want}";` +
                ` failed: ${JSON.stringify(failures.map((f) => f.check))}`);
            problems++;
        }
    }
    if (judgeAll([], quiet) === 0) {
        console.log("SELF-TEST FAIL: empty input was accepted");
        problems++;
    }
    console.log(`judge self-test: ${GOOD.length} known-good records pass, ${BAD.length} wrong records` +
        ` + empty input rejected: ${problems ? `${problems} PROBLEMS` : "ok"}` +
        ` [${versions()}]`);
    return problems === 0;
}

// ---- main -------------------------------------------------------------------------------------

async function main(argv) {
    if (argv.length === 1 && argv[0] === "--self-test") {
        process.exitCode = selfTest() ? 0 : 1;
        return;
    }
    if (argv.length !== 0) {
        console.error("usage: node judge.mjs [--self-test] < records.jsonl");
        process.exitCode = 2;
        return;
    }
    const records = [];
    let lineNo = 0;
    let malformed = 0;
    for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
        lineNo++;
        if (line.trim() === "") continue;
        const rec = attempt(() => JSON.parse(line));
        if (rec instanceof Error) {
            console.log(`FAIL line ${lineNo}: not JSON: ${rec.message}`);
            malformed++;
            continue;
        }
        records.push(rec);
    }
    const failed = judgeAll(records, (l) => console.log(l), malformed);
    process.exitCode = failed ? 1 : 0;
}

await main(process.argv.slice(2));
