package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// fromWorktree builds the candidate at v from the working tree of repo,
// uncommitted changes included, in work.
func fromWorktree(repo, v, work string) (*candidate, error) {
	tree := filepath.Join(work, "tree")
	if err := exportWorktree(repo, tree); err != nil {
		return nil, err
	}
	return newCandidate(tree, v, work, false, zipTree(tree))
}

// fromTags reads the release at v from its tags in repo, zipping each
// module from git as the public module proxy does.
func fromTags(repo, v, work string) (*candidate, time.Time, error) {
	commit, err := revCommit(repo, v)
	if err != nil {
		return nil, time.Time{}, err
	}
	tree := filepath.Join(work, "tree")
	if err := exportRev(repo, commit, tree); err != nil {
		return nil, time.Time{}, err
	}
	c, err := newCandidate(tree, v, work, true, func(w io.Writer, m *pubModule, v string) error {
		subdir := ""
		if m.dir != "." {
			subdir = m.dir
		}
		return zip.CreateFromVCS(w, module.Version{Path: m.path, Version: v}, repo, tagName(m.dir, v), subdir)
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	for _, m := range c.mods {
		t := tagName(m.dir, v)
		switch got, err := revCommit(repo, t); {
		case err != nil:
			c.problemf("no tag %s: %v", t, err)
		case got != commit:
			c.problemf("tag %s is on %.12s, tag %s on %.12s: one commit for all", t, got, v, commit)
		}
	}
	out, err := git(repo, "show", "-s", "--format=%ct", commit)
	if err != nil {
		return nil, time.Time{}, err
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	return c, time.Unix(sec, 0), err
}

func revCommit(repo, rev string) (string, error) {
	out, err := git(repo, "rev-parse", "--verify", "--quiet", "refs/tags/"+rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("no tag %s", rev)
	}
	return strings.TrimSpace(out), nil
}

// writeProxy lays the candidate's modules out in dir as a GOPROXY serves
// them: <module>/@v/list, <version>.info, .mod and .zip.
func writeProxy(dir string, c *candidate, when time.Time) error {
	ev, err := module.EscapeVersion(c.version)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{c.version, when.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	for _, m := range c.mods {
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return err
		}
		d := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		list, _ := os.ReadFile(filepath.Join(d, "list"))
		versions := strings.Fields(string(list))
		if !slices.Contains(versions, c.version) {
			versions = append(versions, c.version)
		}
		for name, data := range map[string][]byte{
			"list":       []byte(strings.Join(versions, "\n") + "\n"),
			ev + ".info": info,
			ev + ".mod":  m.goMod,
		} {
			if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
				return err
			}
		}
		if err := copyFile(m.zip, filepath.Join(d, ev+".zip"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// printProblems prints what stops a release and reports whether there was
// anything.
func printProblems(c *candidate) bool {
	for _, p := range c.problems {
		fmt.Fprintf(os.Stderr, "release: FAIL: %s\n", p)
	}
	return len(c.problems) > 0
}

func runPrepare(repo string, args []string) error {
	fs := flagSet("prepare", "V DIR")
	if err := fs.Parse(args); err != nil || fs.NArg() != 2 {
		fs.Usage()
		return errReported
	}
	v, dir := fs.Arg(0), fs.Arg(1)
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	work, err := os.MkdirTemp("", "kubewire-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := exportWorktree(repo, dir); err != nil {
		return err
	}
	c, err := newCandidate(dir, v, work, false, zipTree(dir))
	if err != nil {
		return err
	}
	for _, m := range c.mods {
		fmt.Printf("%s %s\t%s\n", m.path, v, m.sum)
	}
	if printProblems(c) {
		return errReported
	}
	return nil
}

func runProxy(repo string, args []string) error {
	fs := flagSet("proxy", "[-tags] V DIR")
	tags := fs.Bool("tags", false, "read the modules from the tags of V, not the working tree")
	if err := fs.Parse(args); err != nil || fs.NArg() != 2 {
		fs.Usage()
		return errReported
	}
	v, dir := fs.Arg(0), fs.Arg(1)
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "kubewire-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var c *candidate
	when := time.Now()
	if *tags {
		c, when, err = fromTags(repo, v, work)
	} else {
		c, err = fromWorktree(repo, v, work)
	}
	if err != nil {
		return err
	}
	if err := writeProxy(dir, c, when); err != nil {
		return err
	}
	for _, m := range c.mods {
		fmt.Printf("%s %s\n", m.path, v)
	}
	fmt.Printf("GOPROXY=file://%s,$(go env GOPROXY) GONOSUMDB=%s\n", dir, repoPath)
	if printProblems(c) {
		return errReported
	}
	return nil
}
