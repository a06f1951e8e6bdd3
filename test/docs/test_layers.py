"""The layer map in CMakeLists.txt is the truth about the code, and README.md draws it.

CMakeLists.txt defines one library per folder of service/src, `sf_<folder>`, linked to the
libraries of the layers below it (the block between "# ==== the layers" and "# ==== end of the
layers"). This suite holds the code to that map:
- every folder has its library, every .c file of a folder is compiled into that library alone
  (net/conn_fake.c, test support, into sf_conn_fake), and the links form no cycle;
- every `#include "<folder>/..."` of a .c or .h file names its own folder or one its library links
  directly: an upward or sideways include fails here, even a header-only one the linker never sees;
- README.md's architecture section names every layer and, for each, exactly the folders its
  library links.

Run as ctest layers does: from test/docs, `python3 -m unittest -v test_layers`."""
import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.path.join(ROOT, "service", "src")
TEST_SUPPORT = {"sf_conn_fake": "net"}  # test-only libraries of a folder: library -> folder


def cmake_layers():
    """{library: (sources, linked sf_* libraries)} from the layers block of CMakeLists.txt."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("# ==== the layers")
    block = text[start:text.index("# ==== end of the layers", start)]
    block = re.sub(r"#[^\n]*", "", block)
    libs = {}
    for name, body in re.findall(r"add_library\((sf_\w+)\s+STATIC\s+([^)]*)\)", block):
        srcs = re.findall(r"service/src/([\w/]+\.c)", body)
        libs[name] = (srcs, set())
    for name, body in re.findall(r"target_link_libraries\((sf_\w+)\s+([^)]*)\)", block):
        libs[name][1].update(re.findall(r"\bsf_\w+", body))
    return libs


def folders():
    return sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))


def folder_of(lib):
    return TEST_SUPPORT.get(lib, lib[len("sf_"):])


class LayerMap(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.libs = cmake_layers()

    def test_one_library_per_folder_named_after_it(self):
        expected = {"sf_" + d for d in folders()} | set(TEST_SUPPORT)
        self.assertEqual(set(self.libs), expected)

    def test_every_source_file_is_in_its_folders_library_once(self):
        seen = {}
        for lib, (srcs, _) in self.libs.items():
            for src in srcs:
                self.assertNotIn(src, seen, "%s is in %s and %s" % (src, seen.get(src), lib))
                seen[src] = lib
                self.assertEqual(src.split("/")[0], folder_of(lib),
                                 "%s is compiled into %s, a library of another folder" % (src, lib))
        for d in folders():
            for name in os.listdir(os.path.join(SRC, d)):
                if name.endswith(".c"):
                    self.assertIn("%s/%s" % (d, name), seen, "%s/%s is in no library" % (d, name))

    def test_links_go_only_downwards(self):
        """A depth-first walk finds no cycle; a test-support library is linked by no layer."""
        state = {}

        def visit(lib, path):
            if state.get(lib) == "done":
                return
            self.assertNotEqual(state.get(lib), "open", "cycle: %s" % " -> ".join(path + [lib]))
            state[lib] = "open"
            for dep in sorted(self.libs[lib][1]):
                self.assertIn(dep, self.libs, "%s links %s, which is not a layer" % (lib, dep))
                self.assertNotIn(dep, TEST_SUPPORT, "%s links test support %s" % (lib, dep))
                visit(dep, path + [lib])
            state[lib] = "done"

        for lib in sorted(set(self.libs) - set(TEST_SUPPORT)):
            visit(lib, [])

    def test_includes_name_only_linked_folders(self):
        wrong = []
        for lib, (_, links) in sorted(self.libs.items()):
            if lib in TEST_SUPPORT:
                continue
            folder = folder_of(lib)
            allowed = {folder} | {folder_of(dep) for dep in links}
            for name in sorted(os.listdir(os.path.join(SRC, folder))):
                if not name.endswith((".c", ".h", ".h.in")):
                    continue
                with open(os.path.join(SRC, folder, name), encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = re.match(r'\s*#\s*include\s+"(\w+)/', line)
                        if m and m.group(1) in folders() and m.group(1) not in allowed:
                            wrong.append("%s/%s:%d includes %s/ but %s does not link sf_%s" %
                                         (folder, name, n, m.group(1), lib, m.group(1)))
        self.assertEqual(wrong, [], "\n".join(wrong))

    def test_readme_draws_the_map(self):
        """Each layer's line in README.md's diagram ends with the folders its library links."""
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        section = readme[readme.index("## Architecture"):]
        section = section[:section.index("\n## ", 1)]
        diagram = section[section.index("```") + 3:]
        diagram = diagram[:diagram.index("```")]
        drawn = {}
        current, column = None, None
        for line in diagram.splitlines():
            m = re.search(r"(?:^|\s)(\w+)/\s", line)
            if m and m.group(1) in folders():
                current, column = m.group(1), None
                drawn[current] = set()
            if current is None:
                continue
            if "►" in line:
                column = line.index("►") + 1
                drawn[current] |= set(re.findall(r"\w+", line[column:]))
            elif column is not None and not m:  # the arrow's names wrapped onto the next line
                drawn[current] |= set(re.findall(r"\w+", line[column:]))
        for lib, (_, links) in sorted(self.libs.items()):
            if lib in TEST_SUPPORT:
                continue
            folder = folder_of(lib)
            self.assertIn(folder, drawn, "README's diagram has no %s/ layer" % folder)
            if folder == "app":
                continue  # drawn as "every folder below"
            self.assertEqual(drawn[folder], {folder_of(d) for d in links},
                             "README draws %s/'s arrows unlike CMakeLists.txt" % folder)


if __name__ == "__main__":
    unittest.main()
