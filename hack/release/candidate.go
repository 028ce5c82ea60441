package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// candidate is the published modules of a tree at one version, as the
// release commit holds them.
type candidate struct {
	version string
	tree    string       // the release tree
	mods    []*pubModule // each after the siblings it requires
	// problems stop a release; the modules are built all the same, so that
	// a check can show what users would get.
	problems []string
	untagged []string // directories of the untagged modules
}

type pubModule struct {
	dir, path    string
	requires     []string // published siblings it requires, by module path
	goMod, goSum []byte   // as released
	zip          string   // the module zip
	sum, modSum  string   // go.sum's h1: of the zip and of go.mod
}

func (c *candidate) problemf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *candidate) module(p string) *pubModule {
	for _, m := range c.mods {
		if m.path == p {
			return m
		}
	}
	return nil
}

// checkVersion accepts the versions a release or a rehearsal may have.
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH, with an optional -pre-release", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %s: a %s module needs a /%s suffix on every module path", v, m, m)
	}
	if module.IsPseudoVersion(v) {
		return fmt.Errorf("version %s is a pseudo-version", v)
	}
	return nil
}

// zipper writes the zip of module m at version v.
type zipper func(w io.Writer, m *pubModule, v string) error

// newCandidate reads the published modules of tree at version v, writing
// their zips to work. Unless tagged, it first rewrites their go.mod and
// go.sum files in tree as the release commit holds them; tagged, the tree is
// a release commit already and is only checked. The error is for what stops
// the reading; what stops a release is in the problems.
func newCandidate(tree, v, work string, tagged bool, zipf zipper) (*candidate, error) {
	if err := checkVersion(v); err != nil {
		return nil, err
	}
	l, err := readLayout(tree)
	if err != nil {
		return nil, err
	}
	all, err := goMods(tree)
	if err != nil {
		return nil, err
	}
	c := &candidate{version: v, tree: tree}
	published := map[string]string{} // module path -> directory
	for _, dir := range l.published {
		p, ok := all[dir]
		switch {
		case !ok:
			return nil, fmt.Errorf("%s publishes %s, which has no go.mod", modulesFile, dir)
		case p != modulePath(dir):
			return nil, fmt.Errorf("%s/go.mod: module %s, want %s", dir, p, modulePath(dir))
		case published[p] != "":
			return nil, fmt.Errorf("%s lists %s twice", modulesFile, dir)
		}
		published[p] = dir
		c.mods = append(c.mods, &pubModule{dir: dir, path: p})
	}
	dirs := make([]string, 0, len(all))
	for dir := range all {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		switch {
		case published[all[dir]] == dir:
		case l.isUntagged(dir):
			c.untagged = append(c.untagged, dir)
		default:
			c.problemf("%s/go.mod: module %s is neither published nor under an untagged directory: list it in %s", dir, all[dir], modulesFile)
		}
	}

	files := map[string]*modfile.File{}
	for _, m := range c.mods {
		f, err := c.readGoMod(m, all, published, tagged)
		if err != nil {
			return nil, err
		}
		files[m.path] = f
		if err := c.checkImports(m, all, published); err != nil {
			return nil, err
		}
	}
	if err := c.sortMods(); err != nil {
		return nil, err
	}
	for _, m := range c.mods {
		if !tagged {
			if err := c.rewrite(m, files[m.path], published); err != nil {
				return nil, err
			}
		} else {
			if m.goMod, err = os.ReadFile(filepath.Join(tree, m.dir, "go.mod")); err != nil {
				return nil, err
			}
			m.goSum, _ = os.ReadFile(filepath.Join(tree, m.dir, "go.sum"))
			c.checkSums(m)
		}
		if err := c.zip(m, work, zipf); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// readGoMod checks m's go.mod: the modules of the repository it requires
// are published; it replaces only published siblings, with their
// directories, and, tagged, nothing.
func (c *candidate) readGoMod(m *pubModule, all, published map[string]string, tagged bool) (*modfile.File, error) {
	name := path.Join(m.dir, "go.mod")
	data, err := os.ReadFile(filepath.Join(c.tree, name))
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range f.Require {
		p := r.Mod.Path
		if !inRepo(p) {
			continue
		}
		if _, ok := published[p]; !ok {
			where := "no module of the tree has that path"
			for dir, mp := range all {
				if mp == p {
					where = "its directory " + dir + " is not published"
				}
			}
			c.problemf("%s requires %s: a published module may require only published ones (%s)", name, p, where)
			continue
		}
		if p == m.path {
			continue
		}
		m.requires = append(m.requires, p)
		if tagged && r.Mod.Version != c.version {
			c.problemf("%s requires %s %s, not the release's %s", name, p, r.Mod.Version, c.version)
		}
	}
	for _, r := range f.Replace {
		old := r.Old.Path
		if r.Old.Version != "" {
			old += " " + r.Old.Version
		}
		line := fmt.Sprintf("%s: replace %s => %s", name, old, strings.TrimSpace(r.New.Path+" "+r.New.Version))
		dir, sibling := published[r.Old.Path]
		switch {
		case tagged:
			c.problemf("%s: a released go.mod replaces nothing (users' builds ignore it, and go install refuses it)", line)
		case !sibling || r.Old.Path == m.path:
			c.problemf("%s: a published go.mod replaces only its published siblings, with their directories (users' builds ignore a replace)", line)
		case r.New.Version != "" || path.Clean(path.Join(m.dir, filepath.ToSlash(r.New.Path))) != dir:
			c.problemf("%s: a published sibling is replaced by its directory, %s", line, dir)
		}
	}
	return f, nil
}

// checkImports finds m's imports of another module's internal packages
// and of unpublished modules' packages. Go allows the first by path, but a
// user's build may pair this module with another release of the other
// one. A test file may import the root's internal test helpers: no user
// build compiles it (since Go 1.16 `all` leaves out the tests of
// dependencies), and the module's own tests, run at the versions its
// go.mod states, see the root released with it; a test may not import an
// unpublished module, which its go.mod would then require.
func (c *candidate) checkImports(m *pubModule, all, published map[string]string) error {
	owner := func(ip string) string {
		best := ""
		for _, mp := range all {
			if (ip == mp || strings.HasPrefix(ip, mp+"/")) && len(mp) > len(best) {
				best = mp
			}
		}
		return best
	}
	root := filepath.Join(c.tree, m.dir)
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			if n := d.Name(); n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(c.tree, p)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			c.problemf("%s: %v", rel, err)
			return nil
		}
		for _, is := range f.Imports {
			ip := strings.Trim(is.Path.Value, "`\"")
			if !inRepo(ip) {
				continue
			}
			o := owner(ip)
			switch {
			case o == m.path:
			case o == "":
				c.problemf("%s imports %s, which no module of the tree holds", rel, ip)
			case slices.Contains(strings.Split(strings.TrimPrefix(ip, o), "/"), "internal"):
				if !strings.HasSuffix(rel, "_test.go") {
					c.problemf("%s imports %s, internal to module %s: across modules nothing is internal", rel, ip, o)
				}
			case published[o] == "":
				c.problemf("%s imports %s, of the unpublished module %s", rel, ip, o)
			}
		}
		return nil
	})
}

// sortMods orders the modules so that each comes after the siblings it
// requires: their zips' checksums go into its go.sum.
func (c *candidate) sortMods() error {
	var order []*pubModule
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m *pubModule, chain []string) error
	visit = func(m *pubModule, chain []string) error {
		switch state[m.path] {
		case 1:
			return fmt.Errorf("published modules require each other in a cycle: %s", strings.Join(append(chain, m.path), " -> "))
		case 2:
			return nil
		}
		state[m.path] = 1
		for _, r := range m.requires {
			if err := visit(c.module(r), append(chain, m.path)); err != nil {
				return err
			}
		}
		state[m.path] = 2
		order = append(order, m)
		return nil
	}
	for _, m := range c.mods {
		if err := visit(m, nil); err != nil {
			return err
		}
	}
	c.mods = order
	return nil
}

// rewrite sets m's requirements of its siblings to the release's version,
// drops their replaces and writes their checksums into m's go.sum.
func (c *candidate) rewrite(m *pubModule, f *modfile.File, published map[string]string) error {
	for _, r := range m.requires {
		if err := f.AddRequire(r, c.version); err != nil {
			return err
		}
	}
	for _, r := range slices.Clone(f.Replace) {
		if published[r.Old.Path] != "" && r.Old.Path != m.path {
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	f.Cleanup()
	m.goMod = modfile.Format(f.Syntax)

	sumFile := filepath.Join(c.tree, m.dir, "go.sum")
	old, err := os.ReadFile(sumFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	sums := map[module.Version]string{}
	for i, line := range strings.Split(string(old), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			return fmt.Errorf("%s/go.sum:%d: malformed line", m.dir, i+1)
		}
		if published[fields[0]] != "" {
			continue
		}
		sums[module.Version{Path: fields[0], Version: fields[1]}] = fields[2]
	}
	for _, r := range m.requires {
		s := c.module(r)
		sums[module.Version{Path: r, Version: c.version}] = s.sum
		sums[module.Version{Path: r, Version: c.version + "/go.mod"}] = s.modSum
	}
	m.goSum = formatSums(sums)
	if err := os.WriteFile(filepath.Join(c.tree, m.dir, "go.mod"), m.goMod, 0o644); err != nil {
		return err
	}
	if len(sums) == 0 {
		return nil
	}
	return os.WriteFile(sumFile, m.goSum, 0o644)
}

// formatSums writes go.sum lines in the go command's order.
func formatSums(sums map[module.Version]string) []byte {
	keys := make([]module.Version, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	module.Sort(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %s %s\n", k.Path, k.Version, sums[k])
	}
	return b.Bytes()
}

// checkSums checks a tagged module's go.sum lines for its siblings.
func (c *candidate) checkSums(m *pubModule) {
	have := map[string]bool{}
	for _, line := range strings.Split(string(m.goSum), "\n") {
		have[strings.Join(strings.Fields(line), " ")] = true
	}
	for _, r := range m.requires {
		s := c.module(r)
		for _, want := range []string{r + " " + c.version + " " + s.sum, r + " " + c.version + "/go.mod " + s.modSum} {
			if !have[want] {
				c.problemf("%s/go.sum lacks %q, the checksum of the zip git makes of the tag", m.dir, want)
			}
		}
	}
}

// zip writes m's zip to work and its checksums to m.
func (c *candidate) zip(m *pubModule, work string, zipf zipper) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	m.zip = filepath.Join(work, "zips", filepath.FromSlash(esc)+"@"+c.version+".zip")
	if err := os.MkdirAll(filepath.Dir(m.zip), 0o755); err != nil {
		return err
	}
	f, err := os.Create(m.zip)
	if err != nil {
		return err
	}
	err = zipf(f, m, c.version)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zip of %s: %w", m.path, err)
	}
	if m.sum, err = dirhash.HashZip(m.zip, dirhash.Hash1); err != nil {
		return err
	}
	m.modSum, err = modHash(m.goMod)
	return err
}

// modHash is go.sum's h1: of a go.mod file.
func modHash(data []byte) (string, error) {
	return dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// zipTree zips a module from the release tree as the go command zips it
// from a tag: a module in a subdirectory without a LICENSE gets the root's.
func zipTree(tree string) zipper {
	return func(w io.Writer, m *pubModule, v string) error {
		root := filepath.Join(tree, m.dir)
		var files []zip.File
		haveLicense := false
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				switch d.Name() {
				case ".git", ".hg", ".svn", ".bzr":
					return filepath.SkipDir
				}
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			haveLicense = haveLicense || rel == "LICENSE"
			files = append(files, treeFile{rel: rel, abs: p, info: info})
			return nil
		})
		if err != nil {
			return err
		}
		if !haveLicense && m.dir != "." {
			if data, err := os.ReadFile(filepath.Join(tree, "LICENSE")); err == nil {
				files = append(files, dataFile{name: "LICENSE", data: data})
			}
		}
		return zip.Create(w, module.Version{Path: m.path, Version: v}, files)
	}
}

type treeFile struct {
	rel, abs string
	info     fs.FileInfo
}

func (f treeFile) Path() string                 { return f.rel }
func (f treeFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

type dataFile struct {
	name string
	data []byte
}

func (f dataFile) Path() string                 { return f.name }
func (f dataFile) Lstat() (fs.FileInfo, error)  { return f, nil }
func (f dataFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }
func (f dataFile) Name() string                 { return path.Base(f.name) }
func (f dataFile) Size() int64                  { return int64(len(f.data)) }
func (f dataFile) Mode() fs.FileMode            { return 0o644 }
func (f dataFile) ModTime() time.Time           { return time.Time{} }
func (f dataFile) IsDir() bool                  { return false }
func (f dataFile) Sys() any                     { return nil }
