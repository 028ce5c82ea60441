package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The probe's test against a real API server is package test/probe of the
// untagged test module, so that this module's go.mod requires no test rig.
func TestMain(m *testing.M) {
	if os.Getenv(asCommand) == "1" {
		// Not passed on to what the command starts (a credential plugin).
		_ = os.Unsetenv(asCommand)
		main()
		os.Exit(0) // main exits; should it ever return, no test runs
	}
	goleak.VerifyTestMain(m)
}

// asCommand, set to 1 in a process's environment, makes the test binary
// run the command's main instead of the tests: a test that needs the
// command as a process starts its own binary (command), as Go's own command
// tests do, rather than building it again, which on a cold machine would
// compile client-go a second time, without the race detector. The testing
// package has registered its -test.* flags on flag.CommandLine by then;
// the command parses flag sets of its own.
const asCommand = "KUBEWIRE_TEST_AS_COMMAND"

// command returns the command as a process with args, from the test
// binary, its environment without KUBECONFIG.
func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", asCommand+"=1")
	return cmd
}

var fast = []string{"-latency", "20ms", "-lb-idle", "250ms", "-gaps", "0s,100ms,500ms"}

func TestProbeTable(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	var out, errOut strings.Builder
	code := run(context.Background(), append([]string{"probe"}, fast...), &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	text := out.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	require.GreaterOrEqual(t, len(lines), 10)
	assert.Contains(t, lines[0], "local server answering in 20ms behind a load balancer that drops flows idle over 250ms")
	assert.Regexp(t, `^gap\s+client\s+reused\s+idle\s+latency\s+time left\s+outcome`, lines[2])
	assert.Regexp(t, `^0s\s+client-go\s+yes\s+\S+\s+\S+\s+no deadline\s+ok`, lines[3])
	assert.Regexp(t, `^0s\s+kubewire\s+yes\s+\S+\s+\S+\s+\S+\s+ok`, lines[4])
	// Columns: gap, client, reused, idle, latency, time left, outcome.
	// Durations depend on the machine's load; what they must satisfy does
	// not: the time left is the 2s timeout minus the latency, and an idle
	// time is at least the gap.
	row := strings.Fields(lines[4])
	latency, left := duration(t, row[4]), duration(t, row[5])
	assert.InDelta(t, float64(2*time.Second), float64(latency+left), float64(time.Millisecond), "time left = 2s - latency: %q", lines[4])
	assert.Regexp(t, `^500ms\s+client-go\s+yes\s+\S+\s+\S+\s+no deadline\s+re-sent`, lines[7])
	assert.Regexp(t, `^500ms\s+kubewire\s+yes\s+\S+\s+\S+\s+\S+\s+re-sent`, lines[8])
	for _, line := range lines[7:9] {
		assert.GreaterOrEqual(t, duration(t, strings.Fields(line)[3]), 500*time.Millisecond, "idle at least the gap: %q", line)
	}
	// The longest idle time that survived the 250ms load balancer and the
	// shortest that did not. Which gaps they come from depends on how far a
	// loaded machine overshoots them; that a survivor was idle at most
	// 250ms (the client measures no more idle time than the proxy does) and
	// below the failure does not.
	m := regexp.MustCompile(`drops idle connections after between (\S+) and (\S+?)\.(\s|$)`).FindStringSubmatch(lines[len(lines)-1])
	require.Len(t, m, 4, lines[len(lines)-1])
	lo, hi := duration(t, m[1]), duration(t, m[2])
	assert.LessOrEqual(t, lo, 250*time.Millisecond)
	assert.Less(t, lo, hi)
	// The advice names the option for the client-go config it probed, with
	// the longest idle time that survived.
	assert.Contains(t, lines[len(lines)-1], fmt.Sprintf("kubeadapter.Apply(cfg, kubeadapter.WithIdleConnTimeout(%v))", lo))
	assert.Contains(t, errOut.String(), "probing: idle gap 500ms (3 of 3)", "a progress line while it runs")
}

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	require.NoError(t, err)
	return d
}

func TestProbeJSON(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	var out, errOut strings.Builder
	code := run(context.Background(), append([]string{"probe", "-json"}, fast...), &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	var rep struct {
		Mode, Server, Timeout, Summary string
		Rows                           []struct {
			Client, Gap, Idle, Latency, TimeLeft, Outcome, Error string
			GapSeconds                                           float64
			Reused                                               bool
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out.String()), &rep), out.String())
	require.Len(t, rep.Rows, 6)
	assert.Equal(t, "2s", rep.Timeout)
	assert.Equal(t, "client-go", rep.Rows[0].Client)
	assert.Empty(t, rep.Rows[0].TimeLeft, "stock client-go has no deadline")
	assert.Equal(t, "kubewire", rep.Rows[1].Client)
	assert.NotEmpty(t, rep.Rows[1].TimeLeft)
	assert.Equal(t, 0.5, rep.Rows[4].GapSeconds)
	assert.Equal(t, "re-sent", rep.Rows[4].Outcome)
	assert.NotEmpty(t, rep.Summary)
}

func TestProbeErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string
		code int
		// want is in stderr; the wants that start with "kubewire probe:"
		// are, in order, its last lines.
		want []string
	}{
		{"no command", nil, "", 2, []string{"usage: kubewire <command>"}},
		{"unknown command", []string{"frobnicate"}, "", 2, []string{`kubewire: unknown command "frobnicate"`}},
		{"bad flag", []string{"probe", "-nope"}, "", 2, []string{"flag provided but not defined: -nope", "usage: kubewire probe [flags]"}},
		{"bad gaps", []string{"probe", "-gaps", "1s,soon"}, "", 2, []string{`gap "soon" is not a non-negative duration`}},
		{"bad timeout", []string{"probe", "-timeout", "0s"}, "", 2, []string{"kubewire probe: -timeout must be positive, got 0s"}},
		{"extra argument", []string{"probe", "now"}, "", 2, []string{`kubewire probe: unexpected argument "now"`}},
		{"missing kubeconfig", []string{"probe", "-kubeconfig", "testdata/none.yaml"}, "", 1, []string{"kubewire probe: loading kubeconfig testdata/none.yaml:"}},
		{"unreachable cluster", []string{"probe", "-gaps", "0s", "-timeout", "500ms"}, "../../examples/restconfig/testdata/unreachable.yaml", 1, []string{
			"kubewire probe: client-go cannot reach the API server:",
			"kubewire probe: kubewire cannot reach the API server:",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			var out, errOut strings.Builder
			code := run(context.Background(), tt.args, &out, &errOut)
			assert.Equal(t, tt.code, code)
			assert.NotContains(t, errOut.String(), "goroutine ", "no stack trace")
			var errs []string
			for _, want := range tt.want {
				assert.Contains(t, errOut.String(), want)
				if strings.HasPrefix(want, "kubewire probe:") {
					errs = append(errs, want)
				}
			}
			if len(errs) == 0 {
				return
			}
			// Each error is printed on one line of its own, at the end: an
			// error that spans lines (errors.Join, client-go's aggregates)
			// would leave its tail on a line of its own, and two errors on
			// one line run together.
			lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
			require.GreaterOrEqual(t, len(lines), len(errs), errOut.String())
			for i, line := range lines[len(lines)-len(errs):] {
				assert.True(t, strings.HasPrefix(line, errs[i]), "line %d from the end is error %d: %q", len(errs)-i, i+1, errOut.String())
			}
			assert.Equal(t, len(errs), strings.Count(errOut.String(), "kubewire probe:"), errOut.String())
			if len(errs) > 1 {
				assert.Equal(t, len(errs), strings.Count(errOut.String(), "cannot reach"), "one error a line: %q", errOut.String())
			}
		})
	}
}

// TestHelp: asked for, the usage goes to stdout and the command succeeds,
// as Go's commands do.
func TestHelp(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"-h"}, "usage: kubewire <command>"},
		{[]string{"help"}, "usage: kubewire <command>"},
		{[]string{"probe", "-h"}, "-timeout duration"},
		{[]string{"probe", "-help"}, "-timeout duration"},
		{[]string{"probe", "--help"}, "-timeout duration"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(context.Background(), tt.give, &out, &errOut)
			assert.Equal(t, 0, code)
			assert.Contains(t, out.String(), tt.want)
			assert.Empty(t, errOut.String())
		})
	}
}

// TestProbeFlagLimits: a duration the probe's arithmetic cannot hold, or
// one that makes no sense, is refused before anything is sent, naming the
// flag and the value; the largest allowed are accepted.
func TestProbeFlagLimits(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	local := []string{"-latency", "0s", "-lb-idle", "250ms"}
	tests := []struct {
		name string
		give []string
		code int
		want string // in stderr
	}{
		{"huge timeout", []string{"-timeout", "1000000h", "-gaps", "0s"}, 2, "kubewire probe: -timeout 1000000h0m0s is longer than the 24h0m0s maximum"},
		{"timeout just over", []string{"-timeout", "24h0m0.001s", "-gaps", "0s"}, 2, "kubewire probe: -timeout 24h0m0.001s is longer than the 24h0m0s maximum"},
		{"zero timeout", []string{"-timeout", "0s"}, 2, "kubewire probe: -timeout must be positive, got 0s"},
		{"negative timeout", []string{"-timeout", "-1s"}, 2, "kubewire probe: -timeout must be positive, got -1s"},
		{"huge gap", []string{"-gaps", "0s,1000000h"}, 2, `invalid value "0s,1000000h" for flag -gaps: gap "1000000h" is longer than the 24h0m0s maximum`},
		{"gap just over", []string{"-gaps", "24h0m0.001s"}, 2, `invalid value "24h0m0.001s" for flag -gaps: gap "24h0m0.001s" is longer than the 24h0m0s maximum`},
		{"negative gap", []string{"-gaps", "-1s"}, 2, `invalid value "-1s" for flag -gaps: gap "-1s" is not a non-negative duration`},
		{"largest timeout", []string{"-timeout", "24h", "-gaps", "0s"}, 0, "probing: idle gap 0s (1 of 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A refused value is refused at once; one that is not, with the
			// local server, takes a second or two. The deadline stops a probe
			// that sleeps through a huge gap.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out, errOut strings.Builder
			code := run(ctx, append(append([]string{"probe", "-json"}, local...), tt.give...), &out, &errOut)
			assert.Equal(t, tt.code, code, errOut.String())
			assert.Contains(t, errOut.String(), tt.want)
			if tt.code != 0 {
				assert.Empty(t, out.String())
				return
			}
			var rep struct {
				Rows []struct{ Client, Outcome, Error string }
			}
			require.NoError(t, json.Unmarshal([]byte(out.String()), &rep), out.String())
			for _, r := range rep.Rows {
				assert.Equal(t, "ok", r.Outcome, "%s: %s", r.Client, r.Error)
			}
		})
	}
}

// failingWriter fails every write, as a full disk or a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestProbeWriteError: a report that could not be written is a failure,
// and stderr says so, in either format.
func TestProbeWriteError(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	tests := []struct {
		name   string
		stdout func(t *testing.T) io.Writer
		want   string
	}{
		{"failing writer", func(t *testing.T) io.Writer { return failingWriter{} }, "kubewire probe: writing the report: disk full"},
		{"/dev/full", func(t *testing.T) io.Writer {
			f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			require.NoError(t, err)
			t.Cleanup(func() { _ = f.Close() })
			return f
		}, "kubewire probe: writing the report: write /dev/full: no space left on device"},
	}
	for _, tt := range tests {
		for _, format := range []string{"text", "json"} {
			t.Run(tt.name+", "+format, func(t *testing.T) {
				args := []string{"probe", "-latency", "0s", "-lb-idle", "250ms", "-gaps", "0s"}
				if format == "json" {
					args = append(args, "-json")
				}
				var errOut strings.Builder
				code := run(context.Background(), args, tt.stdout(t), &errOut)
				assert.Equal(t, 1, code, errOut.String())
				assert.True(t, strings.HasSuffix(errOut.String(), tt.want+"\n"), "the last line names the failed write: %q", errOut.String())
			})
		}
	}
}
