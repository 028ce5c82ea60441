// Command release cuts a release of kubewire's published modules, one
// version for all (`release cut V`), and rehearses it in make ci
// (`release check [-only tabcde]`); see RELEASING.md. Every go.mod requires
// its siblings at the last release and keeps `replace => <dir>`; a release
// is one commit setting them to V, and a tag per published module on it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

const (
	repoPath    = "github.com/kubewire/kubewire" // the root module's path, every module's prefix
	modulesFile = "hack/release/modules.txt"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	root, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	if len(args) > 0 && args[0] == "check" {
		return runCheck(root, args[1:])
	}
	if len(args) == 2 && args[0] == "cut" {
		return runCut(root, args[1], func(c *candidate, proxy string) error { return check(c, proxy, "tabcde") })
	}
	return errors.New("usage: release check [-only tabcde] | cut V")
}

var errReported = errors.New("the release check failed")

func git(dir string, args ...string) (string, error) { return gitIn(dir, "", nil, args...) }

// gitIn runs git in dir with stdin and extra environment, and returns its
// output without the trailing newline.
func gitIn(dir, stdin string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, append(os.Environ(), env...), strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func modulePath(dir string) string { return strings.TrimSuffix(repoPath+"/"+dir, "/.") }
func tagName(dir, v string) string { return strings.TrimPrefix(dir+"/"+v, "./") }
func inRepo(p string) bool         { return p == repoPath || strings.HasPrefix(p, repoPath+"/") }
func skipDir(n string) bool {
	return n == "testdata" || n == "vendor" || strings.ContainsAny(n[:1], "._")
}

// prepare exports rev (a commit or a tree) into work/tree, reads the
// candidate at v there and lays it out as a proxy in work/proxy.
func prepare(repo, rev, work, v string) (*candidate, error) {
	tree := filepath.Join(work, "tree")
	script := `mkdir -p "$3" && git -C "$1" archive "$2" | tar -x -C "$3"`
	if out, err := exec.Command("sh", "-c", script, "sh", repo, rev, tree).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git archive %s: %w: %s", rev, err, out)
	}
	c, err := newCandidate(tree, v)
	if err != nil {
		return nil, err
	}
	return c, c.writeProxy(filepath.Join(work, "proxy"), zipDir(tree), true)
}

// runCut makes the release commit of version v and checks it; then, in one
// git transaction, all or nothing, it tags each published module on it and
// moves the branch to it.
func runCut(repo, v string, check func(c *candidate, proxy string) error) error {
	valid := semver.IsValid(v) && semver.Canonical(v) == v && !module.IsPseudoVersion(v)
	if !valid || semver.Major(v) != "v0" && semver.Major(v) != "v1" {
		return fmt.Errorf("version %q: want v0 or v1 MAJOR.MINOR.PATCH, with an optional -pre-release", v)
	}
	branch, err := git(repo, "symbolic-ref", "-q", "HEAD")
	if err != nil {
		return fmt.Errorf("HEAD is on no branch: %w", err)
	}
	head, err := git(repo, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	status, err := git(repo, "status", "--porcelain")
	if err != nil {
		return err
	}
	if status != "" {
		return fmt.Errorf("the working tree has changes; a release is cut from a commit:\n%s", status)
	}
	latest, err := newestRelease(repo)
	if err != nil {
		return err
	}
	if latest != "" && semver.Compare(v, latest) <= 0 {
		return fmt.Errorf("%s is not above the release %s", v, latest)
	}
	// The heading is the version and its date (changelog.go):
	// `## v1.2.3-rc.1` is not v1.2.3's. In a CRLF file, (?m)$ matches after
	// the \r.
	changelog, _ := git(repo, "show", head+":CHANGELOG.md")
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(v) + `( - \d{4}-\d\d-\d\d)?[ \t\r]*$`).MatchString(changelog) {
		return fmt.Errorf("CHANGELOG.md has no heading `## %s - YYYY-MM-DD`: name the release's changes first", v)
	}
	work, err := os.MkdirTemp("", "kubewire-release-cut-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	c, err := prepare(repo, head, work, v)
	if err == nil && len(c.problems) > 0 {
		err = fmt.Errorf("the tree fails the release's reading:\n\t%s", strings.Join(c.problems, "\n\t"))
	}
	if err != nil {
		return err
	}

	// The release commit: HEAD with every go.mod and go.sum as rewritten.
	gitDir, err := git(repo, "rev-parse", "--absolute-git-dir")
	env := []string{"GIT_INDEX_FILE=" + work + "/index", "GIT_DIR=" + gitDir, "GIT_WORK_TREE=" + c.tree}
	var treeID, commit string
	for _, args := range [][]string{{"read-tree", head}, {"add", "-f", "--", "*go.mod", "*go.sum"}, {"write-tree"}} {
		if err == nil {
			treeID, err = gitIn(c.tree, "", env, args...)
		}
	}
	msg := fmt.Sprintf("Release %s\n\nEvery go.mod requires its siblings at %s; the published modules\nare tagged here, one version for all.\n", v, v)
	if err == nil {
		commit, err = git(repo, "commit-tree", treeID, "-p", head, "-m", msg)
	}
	// The checks run on git's own zips of the commit, as the public module
	// proxy will make them: a go.sum that disagrees fails (t) and (d).
	if err == nil {
		err = c.writeProxy(filepath.Join(work, "vcs"), zipVCS(repo, commit), false)
	}
	var ident string
	if err == nil {
		ident, err = git(repo, "var", "GIT_COMMITTER_IDENT")
	}
	if err != nil {
		return fmt.Errorf("no tag made, %s not moved: %w", branch, err)
	}
	var tags []string
	in := "start\nupdate " + branch + " " + commit + " " + head + "\n"
	for _, m := range c.mods {
		tag := tagName(m.dir, v)
		obj, err := gitIn(repo, fmt.Sprintf("object %s\ntype commit\ntag %s\ntagger %s\n\nkubewire %s\n", commit, tag, ident, v), nil, "mktag")
		if err != nil {
			return fmt.Errorf("no tag made, %s not moved: %w", branch, err)
		}
		tags = append(tags, tag)
		in += "create refs/tags/" + tag + " " + obj + "\n"
	}
	// One transaction: every tag and the branch, or nothing. Its dry run
	// finds a tag that exists or cannot be made (a tag `sub` makes sub/V
	// impossible) before the checks.
	_, err = gitIn(repo, in+"prepare\nabort\n", nil, "update-ref", "--stdin")
	if err == nil {
		err = check(c, filepath.Join(work, "vcs"))
	}
	if err == nil {
		_, err = gitIn(repo, in+"prepare\ncommit\n", nil, "update-ref", "--stdin")
	}
	if err != nil {
		return fmt.Errorf("no tag made, %s not moved: %w", branch, err)
	}
	made := fmt.Sprintf("%s is commit %.12s on %s, tagged %s", v, commit, branch, strings.Join(tags, " "))
	// The checkout follows the branch; a file edited during the checks stops it.
	if _, err := git(repo, "read-tree", "-m", "-u", head, commit); err != nil {
		return fmt.Errorf("%s; only the checkout is stale (%w): git diff shows what was edited since the cut began; keep it, then git reset --hard %s", made, err, commit)
	}
	fmt.Fprintf(os.Stderr, "release: %s; publish it with:\n", made)
	fmt.Printf("git push --atomic origin %s %s\n", strings.TrimPrefix(branch, "refs/heads/"), strings.Join(tags, " "))
	return nil
}

// candidate is the published modules of a release tree at one version.
type candidate struct {
	version, tree string
	mods          []*pubModule
	byPath        map[string]*pubModule
	problems      []string // what stops a release; a check builds all the same
}

type pubModule struct {
	dir, path   string
	install     bool     // go-installed: released without replaces, its siblings' sums in its go.sum
	requires    []string // the published siblings it requires
	goMod       []byte
	sum, modSum string // go.sum's h1: of its zip and of its go.mod
}

func (c *candidate) problemf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// parseModules reads modulesFile: the published modules, in its order, and
// the untagged directories, each with a trailing slash.
func parseModules(data []byte) (mods []*pubModule, untagged []string, err error) {
	for n, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
			continue
		case len(f) == 2 && f[0] == "untagged":
			untagged = append(untagged, f[1]+"/")
		case f[0] == "published" && (len(f) == 2 || len(f) == 3 && f[2] == "install"):
			mods = append(mods, &pubModule{dir: f[1], path: modulePath(f[1]), install: len(f) == 3})
		default:
			return nil, nil, fmt.Errorf("%s:%d: want `published DIR [install]` or `untagged DIR`", modulesFile, n+1)
		}
	}
	return mods, untagged, nil
}

// newCandidate reads the tree and rewrites its go.mods as the release commit
// of version v holds them: siblings required at v, an install module's
// replaces dropped. What stops a release is in the problems.
func newCandidate(tree, v string) (*candidate, error) {
	data, err := os.ReadFile(filepath.Join(tree, modulesFile))
	if err != nil {
		return nil, err
	}
	mods, untagged, err := parseModules(data)
	if err != nil {
		return nil, err
	}
	c := &candidate{version: v, tree: tree, mods: mods, byPath: map[string]*pubModule{}}
	for _, m := range mods {
		c.byPath[m.path] = m
	}
	all := map[string]string{} // module path by directory
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != tree && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(tree, filepath.Dir(p))
		all[filepath.ToSlash(rel)] = modfile.ModulePath(data)
		return err
	})
	for _, m := range c.mods {
		if all[m.dir] != m.path && err == nil {
			err = fmt.Errorf("%s publishes %s, whose go.mod is not module %s", modulesFile, m.dir, m.path)
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(all)) {
		m := c.byPath[all[dir]]
		if m != nil && m.dir != dir {
			m = nil // a copy of a published module's path
		}
		if m == nil && !slices.ContainsFunc(untagged, func(u string) bool { return strings.HasPrefix(dir+"/", u) }) {
			c.problemf("%s/go.mod: module %s is neither published nor under an untagged directory in %s", dir, all[dir], modulesFile)
		}
		if err == nil {
			err = c.goMod(dir, m)
		}
		if err == nil && m != nil {
			err = c.checkImports(m, all)
		}
	}
	return c, err
}

// goMod checks and rewrites the go.mod in dir, of the published module m
// or, nil, of an untagged one.
func (c *candidate) goMod(dir string, m *pubModule) error {
	name := path.Join(dir, "go.mod")
	data, _ := os.ReadFile(filepath.Join(c.tree, name))
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return err
	}
	for _, r := range f.Require {
		switch p := r.Mod.Path; {
		case !inRepo(p):
			continue
		case m != nil && c.byPath[p] == nil:
			c.problemf("%s requires %s: a published module may require only published ones", name, p)
		case m != nil:
			m.requires = append(m.requires, p)
		}
		err = errors.Join(err, f.AddRequire(r.Mod.Path, c.version))
	}
	for _, r := range slices.Clone(f.Replace) {
		if m != nil && (c.byPath[r.Old.Path] == nil || r.Old.Path == m.path || r.Old.Version+r.New.Version != "" || modulePath(path.Join(m.dir, r.New.Path)) != r.Old.Path) {
			c.problemf("%s: replace %s => %s: a published go.mod replaces only its published siblings, by their directories", name, r.Old.Path, r.New.Path)
		}
		if m != nil && m.install {
			err = errors.Join(err, f.DropReplace(r.Old.Path, r.Old.Version))
		}
	}
	f.Cleanup()
	return errors.Join(err, os.WriteFile(filepath.Join(c.tree, name), modfile.Format(f.Syntax), 0o644))
}

// checkImports finds m's imports, test files' included, of another
// module's internal packages: a user's build may pair m with another release
// of the other module, and `go test all` compiles m's tests. (An import of
// an unpublished module needs a require, which goMod refuses.)
func (c *candidate) checkImports(m *pubModule, all map[string]string) error {
	root := filepath.Join(c.tree, m.dir)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(c.tree, p)
		rel = filepath.ToSlash(rel)
		_, isModule := all[rel]
		if d.IsDir() && p != root && (isModule || skipDir(d.Name())) {
			return filepath.SkipDir // a module of its own, or skipped
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			owner := "" // the module that holds ip: the longest path that prefixes it
			for _, mp := range all {
				if (ip == mp || strings.HasPrefix(ip, mp+"/")) && len(mp) > len(owner) {
					owner = mp
				}
			}
			if owner != m.path && slices.Contains(strings.Split(strings.TrimPrefix(ip, owner), "/"), "internal") {
				c.problemf("%s imports %s, internal to module %s: across modules nothing is internal, in test files too", rel, ip, owner)
			}
		}
		return nil
	})
}

// zipper writes the zip of module m at version v.
type zipper func(w io.Writer, m *pubModule, v string) error

// zipDir zips a module from the tree as the go command zips it from a tag:
// a module in a subdirectory without a LICENSE gets the root's.
func zipDir(tree string) zipper {
	return func(w io.Writer, m *pubModule, v string) error {
		dir := filepath.Join(tree, m.dir)
		license, err := os.ReadFile(filepath.Join(tree, "LICENSE"))
		if _, serr := os.Stat(filepath.Join(dir, "LICENSE")); serr != nil && err == nil {
			err = os.WriteFile(filepath.Join(dir, "LICENSE"), license, 0o644)
		}
		return errors.Join(err, zip.CreateFromDir(w, module.Version{Path: m.path, Version: v}, dir))
	}
}

// zipVCS zips a module from git at rev, as the public module proxy does.
func zipVCS(repo, rev string) zipper {
	return func(w io.Writer, m *pubModule, v string) error {
		return zip.CreateFromVCS(w, module.Version{Path: m.path, Version: v}, repo, rev, strings.TrimPrefix(m.dir, "."))
	}
}

// writeProxy lays the modules out in dir as a GOPROXY serves them, the
// install modules last, with sums their siblings' checksums first.
func (c *candidate) writeProxy(dir string, zipf zipper, sums bool) (err error) {
	ev, _ := module.EscapeVersion(c.version)
	info, _ := json.Marshal(map[string]string{"Version": c.version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for _, m := range slices.SortedStableFunc(slices.Values(c.mods), func(a, b *pubModule) int {
		return strings.Compare(fmt.Sprint(a.install), fmt.Sprint(b.install)) // false first
	}) {
		if m.install && sums && err == nil {
			err = c.writeSums(m)
		}
		esc, _ := module.EscapePath(m.path)
		d := filepath.Join(dir, esc, "@v")
		m.goMod, _ = os.ReadFile(filepath.Join(c.tree, m.dir, "go.mod"))
		err = errors.Join(err, os.MkdirAll(d, 0o755))
		for name, data := range map[string][]byte{"list": []byte(c.version + "\n"), ev + ".info": info, ev + ".mod": m.goMod} {
			err = errors.Join(err, os.WriteFile(filepath.Join(d, name), data, 0o644))
		}
		z, zerr := os.Create(filepath.Join(d, ev+".zip"))
		if err = errors.Join(err, zerr); err == nil {
			err = errors.Join(zipf(z, m, c.version), z.Close())
		}
		if err == nil {
			m.sum, err = dirhash.HashZip(z.Name(), dirhash.Hash1)
		}
		m.modSum, _ = dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(m.goMod)), nil })
		if err != nil {
			return fmt.Errorf("%s@%s: %w", m.path, c.version, err)
		}
	}
	return nil
}

// writeSums puts into m's go.sum its siblings' checksums at the version.
func (c *candidate) writeSums(m *pubModule) error {
	name := filepath.Join(c.tree, m.dir, "go.sum")
	old, _ := os.ReadFile(name)
	sums := map[module.Version]string{}
	for _, line := range strings.Split(string(old), "\n") {
		if f := strings.Fields(line); len(f) == 3 && c.byPath[f[0]] == nil {
			sums[module.Version{Path: f[0], Version: f[1]}] = f[2]
		}
	}
	for _, p := range m.requires {
		sums[module.Version{Path: p, Version: c.version}] = c.byPath[p].sum
		sums[module.Version{Path: p, Version: c.version + "/go.mod"}] = c.byPath[p].modSum
	}
	keys, b := slices.Collect(maps.Keys(sums)), strings.Builder{}
	module.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %s %s\n", k.Path, k.Version, sums[k])
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}
