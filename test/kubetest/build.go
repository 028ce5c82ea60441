package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
)

// BuildCommand builds the main package in dir into the file out, as a
// test that runs a program of the repository as a process needs it: from
// dir, so that the build selects the program's versions (its go.mod's, or
// the workspace's), not those of the test's module; with GOFLAGS cleared,
// since a matrix leg's -modfile names the test's go.mod; and with the race
// detector when the test binary has it, so that the program shares every
// compiled package with the test instead of compiling its dependencies a
// second time on a cold machine.
func BuildCommand(dir, out string) error {
	args := []string{"-C", dir, "build", "-o", out}
	if raced() {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, b)
	}
	return nil
}

// raced reports whether this binary was built with -race.
func raced() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}
