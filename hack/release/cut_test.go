package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo commits files to a new repository and returns its directory.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	for k, v := range map[string]string{
		"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
		"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
		"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1",
	} {
		t.Setenv(k, v)
	}
	dir := writeTree(t, files)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-qm", "init"}} {
		if _, err := git(dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCut(t *testing.T) {
	files := map[string]string{"CHANGELOG.md": "# Changelog\n\n## v1.2.3\n"}
	for k, v := range testTree {
		files[k] = v
	}
	repo := gitRepo(t, files)
	head, _ := git(repo, "rev-parse", "HEAD")

	if err := runCut(repo, []string{"v1.2.4"}); err == nil || !strings.Contains(err.Error(), "no heading `## v1.2.4`") {
		t.Errorf("cut v1.2.4 without a CHANGELOG heading: %v", err)
	}
	if err := runCut(repo, []string{"v1.2.3"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := git(repo, "rev-parse", "HEAD"); got != head {
		t.Errorf("HEAD moved from %s to %s", head, got)
	}
	if st, _ := git(repo, "status", "--porcelain"); st != "" {
		t.Errorf("the working tree changed:\n%s", st)
	}
	// The tags, zipped by git as the public proxy zips them, hash as the
	// released go.sums say, and their go.mods have no replace.
	c, _, err := fromTags(repo, "v1.2.3", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.problems) > 0 {
		t.Errorf("the tags: %q", c.problems)
	}
	if err := runCut(repo, []string{"v1.2.3"}); err == nil || !strings.Contains(err.Error(), "not above the release v1.2.3") {
		t.Errorf("second cut of v1.2.3: %v", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "kubewire.go"), []byte("package kubewire // changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runCut(repo, []string{"v1.3.0"}); err == nil || !strings.Contains(err.Error(), "the working tree has changes") {
		t.Errorf("cut of a dirty tree: %v", err)
	}
}
