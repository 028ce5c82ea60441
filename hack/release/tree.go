package main

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// repoPath is the module path of the root module; every module of the
// repository has it as prefix.
const repoPath = "github.com/kubewire/kubewire"

// placeholder is the version at which a module of the repository requires
// a sibling, with a replace to its directory.
const placeholder = "v0.0.0-00010101000000-000000000000"

// modulesFile lists the published and the untagged modules.
const modulesFile = "hack/release/modules.txt"

// layout is modulesFile: directories relative to the tree's root, with
// slashes, "." for the root.
type layout struct {
	published []string
	untagged  []string
}

func readLayout(tree string) (*layout, error) {
	f, err := os.Open(filepath.Join(tree, modulesFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var l layout
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, dir, ok := strings.Cut(line, " ")
		dir = strings.TrimSpace(dir)
		if !ok || dir == "" || path.Clean(dir) != dir || path.IsAbs(dir) || strings.HasPrefix(dir, "..") {
			return nil, fmt.Errorf("%s:%d: want `published DIR` or `untagged DIR`, DIR clean and relative", modulesFile, n)
		}
		switch kind {
		case "published":
			l.published = append(l.published, dir)
		case "untagged":
			l.untagged = append(l.untagged, dir)
		default:
			return nil, fmt.Errorf("%s:%d: %q is neither published nor untagged", modulesFile, n, kind)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(l.published) == 0 {
		return nil, fmt.Errorf("%s lists no published module", modulesFile)
	}
	return &l, nil
}

func (l *layout) isUntagged(dir string) bool {
	for _, u := range l.untagged {
		if dir == u || strings.HasPrefix(dir, u+"/") {
			return true
		}
	}
	return false
}

// modulePath is the path a module in dir must have.
func modulePath(dir string) string {
	if dir == "." {
		return repoPath
	}
	return repoPath + "/" + dir
}

// tagName is the tag of the module in dir at version v.
func tagName(dir, v string) string {
	if dir == "." {
		return v
	}
	return dir + "/" + v
}

// inRepo reports whether p is the path of a module or package of the
// repository.
func inRepo(p string) bool {
	return p == repoPath || strings.HasPrefix(p, repoPath+"/")
}

// goMods returns the module path of every go.mod under tree, by directory.
func goMods(tree string) (map[string]string, error) {
	mods := map[string]string{}
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != tree && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, filepath.Dir(p))
		mods[filepath.ToSlash(rel)] = modfile.ModulePath(data)
		return nil
	})
	return mods, err
}

// exportWorktree copies into dst the files a commit of the working tree
// would hold: the tracked ones that exist and the untracked ones git does
// not ignore.
func exportWorktree(repo, dst string) error {
	out, err := git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return err
	}
	for _, name := range strings.Split(out, "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(repo, filepath.FromSlash(name))
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet staged
		}
		if err != nil {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(src, to, info.Mode().Perm()); err != nil {
				return err
			}
		}
	}
	return nil
}

// exportRev writes the tree of commit rev into dst, as git archive has it.
func exportRev(repo, rev, dst string) error {
	cmd := exec.Command("git", "archive", "--format=tar", rev)
	cmd.Dir = repo
	var stderr strings.Builder
	cmd.Stderr = &stderr
	r, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	terr := untar(r, dst)
	io.Copy(io.Discard, r)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", rev, err, strings.TrimSpace(stderr.String()))
	}
	return terr
}

func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if path.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("git archive: unexpected path %q", h.Name)
		}
		to := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(to, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, to); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
