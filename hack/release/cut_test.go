package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// newRepo commits, in a new git repository on main, the root module and sub,
// an install module, under changelog.
func newRepo(t *testing.T, changelog string) string {
	for _, kv := range []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x", "GIT_CONFIG_GLOBAL=" + os.DevNull} {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	for name, data := range map[string]string{
		modulesFile: "published .\npublished sub install\n", "CHANGELOG.md": changelog, "LICENSE": "l\n",
		"go.mod": "module " + repoPath + "\n\ngo 1.26.0\n", "kubewire.go": "package kubewire\n",
		"sub/sub.go": "package sub\n\nimport _ \"" + repoPath + "\"\n",
		"sub/go.mod": "module " + repoPath + "/sub\n\ngo 1.26.0\n\nrequire " + repoPath + " v0.1.0\n\nreplace " + repoPath + " => ../\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-qm", "init"}} {
		gitT(t, dir, args...)
	}
	return dir
}

func gitT(t *testing.T, dir string, args ...string) string {
	out, err := git(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func passes(*candidate, string) error { return nil }

// cut cuts v in repo and reports its error, and whether it left tags,
// branch and working tree as they were.
func cut(t *testing.T, repo, v string, check func(*candidate, string) error) (bool, error) {
	state := func() string {
		return gitT(t, repo, "tag") + gitT(t, repo, "rev-parse", "main") + gitT(t, repo, "status", "--porcelain")
	}
	before := state()
	err := runCut(repo, v, check)
	return state() == before, err
}

// Defect 2: when a module's tag could not be made (a tag `sub` exists, so
// sub/v1.2.3 cannot), the root's v1.2.3 stayed and a rerun was refused.
func TestCutIsAllOrNothing(t *testing.T) {
	repo := newRepo(t, "# Changelog\n\n## v1.2.3\n")
	head := gitT(t, repo, "rev-parse", "main")
	gitT(t, repo, "tag", "sub")
	if same, err := cut(t, repo, "v1.2.3", passes); err == nil || !strings.Contains(err.Error(), "no tag made") || !same {
		t.Errorf("cut v1.2.3 beside a tag sub: %v, nothing changed: %v; want no tag made, nothing changed", err, same)
	}
	if same, err := cut(t, repo, "v1.2.3", func(*candidate, string) error { return errors.New("boom") }); err == nil || !same {
		t.Errorf("cut v1.2.3 that fails its check: %v, nothing changed: %v", err, same)
	}
	gitT(t, repo, "tag", "-d", "sub")
	if _, err := cut(t, repo, "v1.2.3", passes); err != nil {
		t.Fatalf("the rerun: %v", err)
	}
	if st := gitT(t, repo, "status", "--porcelain"); st != "" {
		t.Errorf("the checkout after the release:\n%s\nwant it clean, on the release commit", st)
	}
	release := gitT(t, repo, "rev-parse", "main")
	if got, want := gitT(t, repo, "rev-parse", "main^", "v1.2.3^{commit}", "sub/v1.2.3^{commit}"), head+"\n"+release+"\n"+release; got != want {
		t.Errorf("main^ and the tags' commits: %s; want %s and the release commit on main, %s", got, head, release)
	}
	sub := gitT(t, repo, "show", "main:sub/go.mod") + "\n" + gitT(t, repo, "show", "main:sub/go.sum")
	if strings.Contains(sub, "replace") || !strings.Contains(sub, repoPath+" v1.2.3\n") || !strings.Contains(sub, repoPath+" v1.2.3 h1:") {
		t.Errorf("the released sub/go.mod and go.sum:\n%s\nwant the root at v1.2.3 with its sums, no replace", sub)
	}
	if same, err := cut(t, repo, "v1.2.3", passes); err == nil || !strings.Contains(err.Error(), "not above the release v1.2.3") || !same {
		t.Errorf("a second cut of v1.2.3: %v, nothing changed: %v", err, same)
	}
}

// The version's inputs; defect 1: `## v1.2.3-rc.1` matched `## v1.2.3\b`,
// and v1.2.3 was tagged.
func TestCutVersion(t *testing.T) {
	tests := []struct {
		give, tag, changelog, wantErr string
	}{
		{give: "v1.2.3", changelog: "## v1.2.3-rc.1 - 2026-07-01\n", wantErr: "no heading `## v1.2.3 - YYYY-MM-DD`"},
		{give: "v1.2.3", changelog: "## v1.2.3 - 2026-07-01\n"},
		{give: "v1.2.3", changelog: "## v1.2.3 - soon\n", wantErr: "no heading `## v1.2.3 - YYYY-MM-DD`"},
		{give: "v1.2.3-rc.1"},
		{give: "v1.2.3+build", wantErr: "want v0 or v1"},
		{give: "v2.0.0", wantErr: "want v0 or v1"},
		{give: "v10.0.0", wantErr: "want v0 or v1"},
		{give: "v1.2.3", tag: "v1.2.3", wantErr: "not above the release v1.2.3"},
		{give: "v1.2.2", tag: "v1.2.3", wantErr: "not above the release v1.2.3"},
		{give: "v1.2.3-rc.1", tag: "v1.2.3", wantErr: "not above the release v1.2.3"},
		// Defect 2: pre-release tags were skipped, and rc.1 was cut below rc.2.
		{give: "v1.3.0-rc.1", tag: "v1.3.0-rc.2", wantErr: "not above the release v1.3.0-rc.2"},
		{give: "v1.3.0-rc.2", tag: "v1.3.0-rc.2", wantErr: "not above the release v1.3.0-rc.2"},
		{give: "v1.2.9", tag: "v1.3.0-rc.2", wantErr: "not above the release v1.3.0-rc.2"},
		{give: "v1.3.0", tag: "v1.3.0-rc.2"},
		{give: "v1.2.3", changelog: "# Changelog\r\n\r\n## v1.2.3\r\n\r\n- a change\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if tt.changelog == "" {
				tt.changelog = "## " + tt.give + "\n"
			}
			repo := newRepo(t, tt.changelog)
			if tt.tag != "" {
				gitT(t, repo, "tag", tt.tag)
			}
			same, err := cut(t, repo, tt.give, passes)
			if tt.wantErr == "" && err != nil {
				t.Errorf("cut %s under %q: %v", tt.give, tt.changelog, err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !same) {
				t.Errorf("cut %s: %v, nothing changed: %v; want %q, nothing changed", tt.give, err, same, tt.wantErr)
			}
		})
	}
}

// A go.mod edited during the checks keeps the checkout from following the
// release: the error says the release is made and how to follow it.
func TestCutReportsAStaleCheckout(t *testing.T) {
	repo := newRepo(t, "## v1.2.3\n")
	edit := func(*candidate, string) error {
		return os.WriteFile(filepath.Join(repo, "sub", "go.mod"), []byte("edited\n"), 0o644)
	}
	_, err := cut(t, repo, "v1.2.3", edit)
	release := gitT(t, repo, "rev-parse", "v1.2.3^{commit}")
	if err == nil || !strings.Contains(err.Error(), "git reset --hard "+release) || gitT(t, repo, "rev-parse", "main") != release {
		t.Fatalf("cut v1.2.3, sub/go.mod edited during the checks: %v; want the release made, main on it, and the fix", err)
	}
	gitT(t, repo, "reset", "--hard", release)
	if st := gitT(t, repo, "status", "--porcelain"); st != "" {
		t.Errorf("the checkout after the fix:\n%s\nwant it clean", st)
	}
}
