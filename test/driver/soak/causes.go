package soak

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The causes a failed operation is filed under, as TestHASideBySide files
// a failed request of client-go: what the API server, or the way to it,
// did to the operation's requests.
const (
	// CauseGoaway: a connection to the API server was closed with a
	// GOAWAY while a request was on it.
	CauseGoaway = "GOAWAY"
	// CauseUnavailable: the API server answered 429 or 503 (a draining
	// replica answers 429 with Retry-After), or another 5xx.
	CauseUnavailable = "429 / unavailable"
	// CauseConnLoss: the connection broke, or was refused, under a
	// request.
	CauseConnLoss = "connection loss"
	// CauseDeadline: a request ran out of time: the gateway's time per
	// attempt, or the client's per operation.
	CauseDeadline = "deadline"
	// CauseOther: anything else, among it a gateway's 5xx no failed API
	// request explains.
	CauseOther = "other"
	// CauseEndOfRun: no answer came before the run ended: no failure,
	// counted to account for every operation.
	CauseEndOfRun = "end of run"
	// CauseRefused: the gateway answered 4xx, the API server's verdict on
	// the request (not found, already exists, conflict, precondition):
	// the workload chooses some operations that must fail.
	CauseRefused = "refused (4xx)"
)

// causeNames orders the causes in reports.
var causeNames = []string{CauseGoaway, CauseUnavailable, CauseConnLoss, CauseDeadline, CauseOther, CauseRefused, CauseEndOfRun}

// NoWindow names the failures no fault window overlaps.
const NoWindow = "none"

// errorCause files a request's error. The GOAWAY error of Go's HTTP/2
// client is a type net/http does not export (http2GoAwayError, whose
// text is "http2: server sent GOAWAY and closed the connection; ..."), and
// a connection lost under an HTTP/2 stream is often a message only
// ("http2: client connection lost", "...; INTERNAL_ERROR; received from
// peer"), so those are matched by their words, here alone.
func errorCause(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "GOAWAY"):
		return CauseGoaway
	case connLost(err):
		return CauseConnLoss
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return CauseDeadline
	}
	return textCause(s)
}

// textCause files an error known by its text only: an error of the
// history, or one without its chain.
func textCause(s string) string {
	switch {
	case strings.Contains(s, "GOAWAY"):
		return CauseGoaway
	case strings.Contains(s, "Too many requests"), strings.Contains(s, "the server is currently unable"),
		strings.Contains(s, "is shutting down"):
		return CauseUnavailable
	case strings.Contains(s, "connection refused"), strings.Contains(s, "connection reset"),
		strings.Contains(s, "EOF"), strings.Contains(s, "connection lost"), strings.Contains(s, "broken pipe"),
		strings.Contains(s, "INTERNAL_ERROR"), strings.Contains(s, "use of closed network connection"):
		return CauseConnLoss
	case strings.Contains(s, "deadline exceeded"), strings.Contains(s, "timeout"), strings.Contains(s, "context canceled"):
		return CauseDeadline
	}
	return CauseOther
}

// connLost reports whether err is a broken or refused connection, by its
// chain.
func connLost(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// statusCause files an API server's answer; "" for one that is no
// failure of the server.
func statusCause(code int) string {
	if code == http.StatusTooManyRequests || code >= 500 {
		return CauseUnavailable
	}
	return ""
}

// causeLog keeps, by operation, what happened to the requests the API
// proxy forwarded for it that failed on the way to the API server: the
// cause of each, in order. It is safe for concurrent use.
type causeLog struct {
	mu sync.Mutex
	m  map[string][]Upstream
}

// Upstream is one API request of an operation that failed on the way to
// the API server.
type Upstream struct {
	Cause string `json:"cause"`
	// Error is the proxy's error, or the API server's status.
	Error string `json:"error"`
	// Unanswered is set for a write the proxy sent that got no answer.
	Unanswered *Unanswered `json:"unanswered,omitempty"`
}

// Unanswered is a write of an object that the API proxy sent and the API
// server never answered. A replica killed while it ran the write may
// have stored it and logged no audit event of it: the proxy's record is
// then the only one of a write that may have been applied.
type Unanswered struct {
	Verb      string    `json:"verb"`
	Resource  string    `json:"resource"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	At        time.Time `json:"at"`
}

// unanswered is the write r is, with its body, sent at; nil for a read or
// a request it cannot tell the object of.
func unanswered(r *http.Request, body []byte, at time.Time) *Unanswered {
	verbs := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}
	verb := verbs[r.Method]
	// /api/v1/namespaces/ns/res[/name[/sub]] or /apis/group/version/...
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	i := slices.Index(parts, "namespaces")
	if verb == "" || i < 0 || len(parts) < i+3 {
		return nil
	}
	u := &Unanswered{Verb: verb, Namespace: parts[i+1], Resource: parts[i+2], At: at}
	if len(parts) > i+3 {
		u.Name = parts[i+3]
	} else if verb == "create" {
		var obj struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if json.Unmarshal(body, &obj) != nil {
			return nil
		}
		u.Name = obj.Metadata.Name
	}
	if u.Name == "" {
		return nil
	}
	return u
}

func (l *causeLog) add(op string, u Upstream) {
	if op == "" || u.Cause == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]Upstream{}
	}
	l.m[op] = append(l.m[op], u)
}

// failed is the Upstream of a request that failed with err.
func failed(err error) Upstream { return Upstream{Cause: errorCause(err), Error: err.Error()} }

// answered is the Upstream of a request the API server answered code:
// none for an answer that is no failure of the server.
func answered(code int) Upstream {
	return Upstream{Cause: statusCause(code), Error: http.StatusText(code)}
}

func (l *causeLog) snapshot() map[string][]Upstream {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]Upstream, len(l.m))
	for k, v := range l.m {
		out[k] = slices.Clone(v)
	}
	return out
}

// Failure is one user operation that failed, and what it is filed under.
type Failure struct {
	Op     string `json:"op"`
	Kind   Kind   `json:"kind"`
	Status int    `json:"status,omitempty"`
	Cause  string `json:"cause"`
	// Window is the fault whose window the operation overlaps, or
	// [NoWindow].
	Window string `json:"window"`
	// Upstream are the causes of the operation's API requests that
	// failed, in order, as the API proxy saw them.
	Upstream []Upstream `json:"upstream,omitempty"`
}

// CauseCount is how many operations failed of one cause, in all and by
// fault window.
type CauseCount struct {
	Cause    string         `json:"cause"`
	Total    int            `json:"total"`
	ByWindow map[string]int `json:"byWindow"`
}

// failureCause files a failed operation:
//
//   - An operation the end of the run cut short: [CauseEndOfRun].
//   - A 4xx of the gateway is the API server's verdict: [CauseRefused].
//   - No answer from the gateway: the client's deadline, or its connection
//     to the gateway lost, by the client's error.
//   - A 5xx of the gateway: the last failure of the operation's API
//     requests the API proxy saw (a GOAWAY, a 429 or 5xx answer, a
//     connection lost or refused, the gateway giving up on the request);
//     with none, the failure was between the gateway and the proxy or the
//     gateway's own: [CauseOther].
//
// A fence change goes to the API server directly; its client-go error's
// text files it.
func failureCause(op Op, upstream []Upstream) string {
	switch {
	case strings.HasPrefix(op.Error, endOfRun):
		return CauseEndOfRun
	case op.Outcome == Fail:
		return CauseRefused
	case op.Kind == Fence:
		return textCause(op.Error)
	case op.Status == 0:
		return textCause(op.Error)
	case len(upstream) > 0:
		return upstream[len(upstream)-1].Cause
	}
	return CauseOther
}

// failures files every operation that did not succeed by cause and by
// the fault window it overlaps.
func (r *Result) failures(in Input) {
	counts := map[string]*CauseCount{}
	for _, op := range in.History {
		if op.Outcome == OK {
			continue
		}
		f := Failure{Op: op.ID, Kind: op.Kind, Status: op.Status, Upstream: in.Causes[op.ID], Window: NoWindow}
		f.Cause = failureCause(op, f.Upstream)
		for _, w := range in.Faults {
			if w.From.Before(op.End) && !w.To.Before(op.Start) {
				f.Window = w.Fault
				break
			}
		}
		c := counts[f.Cause]
		if c == nil {
			c = &CauseCount{Cause: f.Cause, ByWindow: map[string]int{}}
			counts[f.Cause] = c
		}
		c.Total++
		c.ByWindow[f.Window]++
		r.Failures = append(r.Failures, f)
	}
	for _, name := range causeNames {
		c := counts[name]
		if c == nil {
			c = &CauseCount{Cause: name, ByWindow: map[string]int{}}
		}
		r.FailuresByCause = append(r.FailuresByCause, *c)
	}
}

// windowNames are the windows a report's failures fall in, in the order
// of faultNames, then NoWindow.
func windowNames(counts []CauseCount) []string {
	seen := map[string]bool{}
	for _, c := range counts {
		for w := range c.ByWindow {
			seen[w] = true
		}
	}
	var out []string
	for _, name := range append(slices.Clone(faultNames), NoWindow) {
		if seen[name] {
			out = append(out, name)
		}
	}
	return out
}
