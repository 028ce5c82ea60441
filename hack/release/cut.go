package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

func runCut(repo string, args []string) error {
	fs := flagSet("cut", "V")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fs.Usage()
		return errReported
	}
	v := fs.Arg(0)
	if err := checkVersion(v); err != nil {
		return err
	}
	if st, err := git(repo, "status", "--porcelain"); err != nil {
		return err
	} else if st != "" {
		return fmt.Errorf("the working tree has changes; a release is cut from a commit:\n%s", st)
	}
	head, err := git(repo, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	head = strings.TrimSpace(head)
	out, err := git(repo, "tag", "-l", "v*")
	if err != nil {
		return err
	}
	for _, t := range strings.Fields(out) {
		if semver.IsValid(t) && semver.Prerelease(t) == "" && semver.Compare(v, t) <= 0 {
			return fmt.Errorf("%s is not above the release %s", v, t)
		}
	}

	work, err := os.MkdirTemp("", "kubewire-release-cut-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")
	if err := exportRev(repo, head, tree); err != nil {
		return err
	}
	changelog, err := os.ReadFile(filepath.Join(tree, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(v) + `\b`).Match(changelog) {
		return fmt.Errorf("CHANGELOG.md has no heading `## %s`: name the release's changes first", v)
	}
	c, err := newCandidate(tree, v, work, false, zipTree(tree))
	if err != nil {
		return err
	}
	if printProblems(c) {
		return errReported
	}
	var tags []string
	for _, m := range c.mods {
		t := tagName(m.dir, v)
		if _, err := git(repo, "rev-parse", "--verify", "--quiet", "refs/tags/"+t); err == nil {
			return fmt.Errorf("tag %s exists", t)
		}
		tags = append(tags, t)
	}

	// The release commit: HEAD's tree with the published go.mods and
	// go.sums as prepared, written with a private index.
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(work, "index")}
	if _, err := gitEnv(repo, env, "read-tree", head); err != nil {
		return err
	}
	for _, m := range c.mods {
		for _, name := range []string{"go.mod", "go.sum"} {
			rel := path.Join(m.dir, name)
			if _, err := os.Stat(filepath.Join(tree, filepath.FromSlash(rel))); err != nil {
				continue
			}
			sha, err := git(repo, "hash-object", "-w", filepath.Join(tree, filepath.FromSlash(rel)))
			if err != nil {
				return err
			}
			if _, err := gitEnv(repo, env, "update-index", "--add", "--cacheinfo", "100644,"+strings.TrimSpace(sha)+","+rel); err != nil {
				return err
			}
		}
	}
	treeID, err := gitEnv(repo, env, "write-tree")
	if err != nil {
		return err
	}
	list := tags[len(tags)-1]
	if len(tags) > 1 {
		list = strings.Join(tags[:len(tags)-1], ", ") + " and " + list
	}
	msg := fmt.Sprintf("Release %s\n\n%s\n", v, wrap(fmt.Sprintf("Every published module at %s, each requiring its siblings at %s with no replace, tagged %s.", v, v, list), 72))
	commit, err := git(repo, "commit-tree", strings.TrimSpace(treeID), "-p", head, "-m", msg)
	if err != nil {
		return err
	}
	commit = strings.TrimSpace(commit)

	// Before any tag: git's own zips of the commit, as the public module
	// proxy will make them, hash as the siblings' go.sums say.
	for _, m := range c.mods {
		got, err := vcsHash(repo, commit, m, v, work)
		if err != nil {
			return err
		}
		if got != m.sum {
			return fmt.Errorf("the zip of %s from commit %.12s hashes %s, the go.sums say %s", m.path, commit, got, m.sum)
		}
	}
	for _, t := range tags {
		if _, err := git(repo, "tag", "-a", "-m", "kubewire "+v, t, commit); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "release: commit %.12s %q on top of %.12s (HEAD), on no branch\n", commit, "Release "+v, head)
	fmt.Fprintf(os.Stderr, "release: tagged %s\n", strings.Join(tags, " "))
	fmt.Fprintf(os.Stderr, "release: undo with: git tag -d %s\n", strings.Join(tags, " "))
	fmt.Printf("git push origin %s\n", strings.Join(tags, " "))
	return nil
}

// vcsHash is the h1: of the zip git makes of m at commit.
func vcsHash(repo, commit string, m *pubModule, v, work string) (string, error) {
	f, err := os.CreateTemp(work, "vcs-*.zip")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	subdir := ""
	if m.dir != "." {
		subdir = m.dir
	}
	err = zip.CreateFromVCS(f, module.Version{Path: m.path, Version: v}, repo, commit, subdir)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var unrecognized *zip.UnrecognizedVCSError
		if errors.As(err, &unrecognized) {
			return "", fmt.Errorf("%v: cut from a clone, not a linked worktree", err)
		}
		return "", err
	}
	return dirhash.HashZip(f.Name(), dirhash.Hash1)
}

func gitEnv(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// wrap breaks s into lines of at most width characters where it can.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteString("\n")
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
