// Command release cuts a release of kubewire's published modules, one
// version for all, and rehearses it before every merge.
//
//	release check [-tags V] [-v] [-keep]   the rehearsal: make release-check
//	release prepare V DIR                  the release tree at V, written to DIR
//	release proxy [-tags] V DIR            a file:// module proxy of the modules at V
//	release cut V                          the release commit and its tags; pushes nothing
//
// The published modules are listed in hack/release/modules.txt, with the
// directories whose modules are never tagged; every go.mod of the tree must
// be in one list or the other.
//
// Inside the repository a published module requires its published siblings
// at the placeholder v0.0.0-00010101000000-000000000000, with a replace to
// the sibling's directory. The release tree at V is the tree with, in each
// published go.mod, those requirements set to V and those replaces dropped,
// and, in each go.sum, the siblings' checksums at V, computed from the
// module zips of the release tree in dependency order. Nothing else changes:
// any other replace, a requirement of a module of this repository that is
// not published, or an import of another module's internal package stops a
// release.
//
// check builds that tree from the working tree, uncommitted changes
// included (tracked files and untracked ones git does not ignore), at a
// candidate version named after its content, serves it from a file://
// proxy and checks it as users get it: scratch modules outside the
// repository, with no replace and no workspace, go get it. With -tags V it checks the tags of a
// cut release instead, zipped from git as the public proxy zips them.
//
// cut needs a clean tree. It writes the release commit with git plumbing,
// on top of HEAD but on no branch (the working tree, the index and HEAD are
// untouched), checks that git's own zips of the commit hash as the go.sums
// say, tags each module and prints the push command.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const usage = `usage: release [-C repo] <command> [flags]

commands:
  check [-tags V] [-keep] [-v]
        build the candidate from the working tree (or the tags of V), serve
        it from a file:// proxy and check it from scratch modules
  prepare V DIR
        write the release tree at V to DIR, for a look at it
  proxy [-tags] V DIR
        write a file:// module proxy of the published modules at V to DIR,
        from the working tree (or, with -tags, from the tags of V)
  cut V
        on a clean tree: the release commit (on no branch) and a tag per
        module; prints the git push command, pushes nothing
`

func main() {
	log := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "release: "+format+"\n", args...) }
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	repo := fs.String("C", "", "the repository (default: the one holding the current directory)")
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	root, err := repoRoot(*repo)
	if err != nil {
		log("%v", err)
		os.Exit(2)
	}
	cmd, args := fs.Arg(0), fs.Args()[1:]
	var run func(root string, args []string) error
	switch cmd {
	case "check":
		run = runCheck
	case "prepare":
		run = runPrepare
	case "proxy":
		run = runProxy
	case "cut":
		run = runCut
	default:
		log("unknown command %q", cmd)
		fs.Usage()
		os.Exit(2)
	}
	if err := run(root, args); err != nil {
		if err != errReported {
			log("%v", err)
		}
		os.Exit(1)
	}
}

// errReported ends a command whose failures are already printed.
var errReported = fmt.Errorf("failed")

func repoRoot(dir string) (string, error) {
	if dir == "" {
		dir = "."
	}
	out, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	return filepath.Abs(strings.TrimSpace(out))
}

// git runs git in dir and returns its standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func flagSet(name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: release %s %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}
