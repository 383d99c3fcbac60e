package kvxds_test

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kvxds/kvxds/"

// packageMapDoc holds the package map.
const packageMapDoc = "docs/development.md"

// TestPackageMap holds the code to the package map: every
// package has a row, and a package imports only the kvxds packages its row
// allows, so no import climbs back up a layer. Test files are exempt: a
// test may drive its package from above.
func TestPackageMap(t *testing.T) {
	rows := readPackageMap(t, packageMapDoc)
	imports := packageImports(t, ".")
	if len(imports) < 20 {
		t.Fatalf("found only %d packages", len(imports))
	}
	for pkg, imps := range imports {
		row, ok := findRow(rows, pkg)
		if !ok {
			t.Errorf("package %s has no row in the package map", pkg)
			continue
		}
		for _, imp := range imps {
			if !row.allows(imp) {
				t.Errorf("%s imports %s, which its row in the package map (%s) does not allow", pkg, imp, row.folder)
			}
		}
	}
	for _, r := range rows {
		if !r.pattern() {
			if _, ok := imports[r.folder]; !ok {
				t.Errorf("the package map lists %s, which holds no package", r.folder)
			}
		}
	}
}

// TestFoldersAreLayers holds the order of the package map to the order
// of the imports: the rows run from the bottom layer (imported by the
// others) to the top, a package imports only packages whose rows come
// before its own (or, for a subtree row such as cmd/..., packages of the
// same subtree), and the rows of one top-level folder sit together, so a
// folder is one layer (or a run of adjacent ones) and no import climbs
// out of it and back.
func TestFoldersAreLayers(t *testing.T) {
	rows := readPackageMap(t, packageMapDoc)
	index := func(pkg string) int {
		if i := slices.IndexFunc(rows, func(r mapRow) bool { return !r.pattern() && r.matches(pkg) }); i >= 0 {
			return i
		}
		return slices.IndexFunc(rows, func(r mapRow) bool { return r.pattern() && r.matches(pkg) })
	}
	for pkg, imps := range packageImports(t, ".") {
		at := index(pkg)
		if at < 0 {
			continue // TestPackageMap reports it
		}
		for _, imp := range imps {
			if i := index(imp); i > at || (i == at && !rows[at].pattern()) {
				t.Errorf("%s (row %d of the package map) imports %s (row %d): a package may import only the rows above its own", pkg, at+1, imp, i+1)
			}
		}
	}
	last := map[string]int{}
	for i, r := range rows {
		top, _, _ := strings.Cut(r.folder, "/")
		if j, seen := last[top]; seen && j != i-1 {
			t.Errorf("the package map's rows of %s/ are not together: %s (row %d) is apart from row %d", top, r.folder, i+1, j+1)
		}
		last[top] = i
	}
}

// mapRow is one line of the map: a folder ("cmd/..." for a folder and
// everything under it) and the kvxds packages it may import (the same
// patterns; "*" for any).
type mapRow struct {
	folder string
	may    []string
}

func (r mapRow) pattern() bool { return strings.HasSuffix(r.folder, "/...") }

func (r mapRow) matches(pkg string) bool {
	if r.pattern() {
		return strings.HasPrefix(pkg, strings.TrimSuffix(r.folder, "...")) || pkg == strings.TrimSuffix(r.folder, "/...")
	}
	return pkg == r.folder
}

func (r mapRow) allows(imp string) bool {
	for _, m := range r.may {
		if m == "*" || m == imp || (strings.HasSuffix(m, "/...") && (strings.HasPrefix(imp, strings.TrimSuffix(m, "...")) || imp == strings.TrimSuffix(m, "/..."))) {
			return true
		}
	}
	return false
}

// findRow returns the row of pkg: its own, else the subtree pattern that
// covers it.
func findRow(rows []mapRow, pkg string) (mapRow, bool) {
	if i := slices.IndexFunc(rows, func(r mapRow) bool { return !r.pattern() && r.matches(pkg) }); i >= 0 {
		return rows[i], true
	}
	i := slices.IndexFunc(rows, func(r mapRow) bool { return r.pattern() && r.matches(pkg) })
	if i < 0 {
		return mapRow{}, false
	}
	return rows[i], true
}

var code = regexp.MustCompile("`([^`]+)`")

// readPackageMap reads the table under "### Package map": | `folder` |
// what it owns | `a`, `b` (or "nothing", or "anything") |.
func readPackageMap(t *testing.T, readme string) []mapRow {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []mapRow
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			in = strings.TrimSpace(strings.TrimLeft(line, "#")) == "Package map"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("package map row %q: want 3 cells", line)
		}
		folder := code.FindStringSubmatch(cells[0])
		if folder == nil {
			t.Fatalf("package map row %q: no folder", line)
		}
		r := mapRow{folder: folder[1]}
		may := strings.TrimSpace(cells[2])
		if may == "anything" {
			r.may = []string{"*"}
		}
		for _, m := range code.FindAllStringSubmatch(may, -1) {
			r.may = append(r.may, m[1])
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no package map", readme)
	}
	return rows
}

// packageImports returns, for every package under root, the kvxds
// packages its non-test files import (module prefix removed).
func packageImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			return nil // this test
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if rest, ok := strings.CutPrefix(p, module); ok && !slices.Contains(out[pkg], rest) {
				out[pkg] = append(out[pkg], rest)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
