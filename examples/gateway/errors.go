package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubewire/kubewire/driver"
)

// statusOf maps an error to an HTTP status: 413 for a request body over
// the limit, 408 for one that did not arrive in time, else by the driver
// error's kind.
func statusOf(err error) int {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	var body *bodyError
	if errors.As(err, &body) && body.Timeout() {
		return http.StatusRequestTimeout
	}
	switch kindOf(err) {
	case driver.KindNotFound:
		return http.StatusNotFound
	case driver.KindAlreadyExists, driver.KindConflict:
		return http.StatusConflict
	case driver.KindPrecondition:
		return http.StatusPreconditionFailed
	case driver.KindInvalidArgument:
		return http.StatusBadRequest
	case driver.KindUnavailable:
		return http.StatusServiceUnavailable
	case driver.KindForbidden:
		if refusedByAdmission(err) {
			return http.StatusForbidden
		}
	}
	return http.StatusInternalServerError
}

// kindOf is the driver error's kind as a caller is told it: a sandbox
// another gateway manages is not found, as a missing one is, so that a
// caller does not learn which names exist.
func kindOf(err error) driver.Kind {
	if errors.Is(err, driver.ErrNotOwned) {
		return driver.KindNotFound
	}
	return driver.KindOf(err)
}

// authorizerDenial matches the message of the API server's authorizer
// denying a request, k8s.io/apiserver's responsewriters.forbiddenMessage
// (v0.37.2): `User "<name>" cannot <verb> resource ...` (or `path ...`),
// after `<resource> "<name>" is forbidden: `. Admission's refusals, such as
// ResourceQuota's "exceeded quota: ..." and NamespaceLifecycle's "unable
// to create new content in namespace ... because it is being terminated",
// have the same code and reason (403, Forbidden) and name no user: the
// message is all that tells them apart.
var authorizerDenial = regexp.MustCompile(`User "(?:[^"\\]|\\.)*" cannot `)

// refusedByAdmission reports whether err, of kind forbidden, is the API
// server's admission refusing the request (a quota, a namespace being
// deleted), which its caller can act on, rather than its authorizer
// denying the gateway's own user: that is the gateway's to fix, and its
// message names the user. Anything it cannot tell is the latter.
func refusedByAdmission(err error) bool {
	var status apierrors.APIStatus
	return driver.KindOf(err) == driver.KindForbidden && errors.As(err, &status) &&
		!authorizerDenial.MatchString(status.Status().Message)
}

// reply writes body, if any, as JSON with code; a caller whose answer
// cannot be written gets none either way.
func reply(w http.ResponseWriter, code int, body any) {
	if body == nil {
		w.WriteHeader(code)
		return
	}
	_ = writeAnswer(w, code, body)
}

// fail answers err with its status and {"kind", "error", "id"}: error is
// [publicMessage]'s, id the request's ID, also in the X-Request-Id
// header, under which the whole chain is logged. The chain stays in the
// log because a transport error names the API server's URL and the
// addresses of its connection, which are no business of an HTTP caller.
// The log line comes after the answer and says whether it was written:
// one that could not be (its caller went away, the write deadline passed)
// reaches no one, and the line says answered=false with the write's error.
// A write to a connection whose peer has gone usually succeeds into the
// socket's buffer: what fails is a write past its deadline, or to a
// connection already broken.
func fail(w http.ResponseWriter, r *http.Request, log logr.Logger, err error) {
	id := requestID(w, r)
	code := statusOf(err)
	kv := []any{"id", id, "method", r.Method, "path", logPath(r), "status", code}
	if name := userName(r); name != "" {
		kv = append(kv, "user", name)
	}
	if werr := writeAnswer(w, code, map[string]string{"kind": kindOf(err).String(), "error": publicMessage(err), "id": id}); werr != nil {
		kv = append(kv, "answered", false, "writeErr", werr)
	}
	if code >= http.StatusInternalServerError {
		log.Error(err, "request failed", kv...)
	} else {
		log.Info("request refused", append(kv, "err", err)...)
	}
}

// requestID returns r's request ID ([withRequestIDs]), or a fresh one if
// it carries none, set in w's X-Request-Id header.
func requestID(w http.ResponseWriter, r *http.Request) string {
	id, ok := requestIDFrom(r.Context())
	if !ok {
		id = rand.Text()
	}
	w.Header().Set("X-Request-Id", id)
	return id
}

// writeAnswer writes body as JSON with code, and flushes it to the connection,
// so that a failed write is known: it returns the write's error.
func writeAnswer(w http.ResponseWriter, code int, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	if _, err := w.Write(b); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

// publicMessage is what a caller is told of err: the driver's operation,
// sandbox and kind and, for a kind the caller can act on (a forbidden one
// only if [refusedByAdmission]), the cause, which is then the API server's
// message to its client or the driver's words about the request. Other
// causes (a transport error, an API server's 5xx answer, which may quote
// a proxy's, the authorizer's denial of the gateway's user) are left out.
func publicMessage(err error) string {
	var de *driver.Error
	if !errors.As(err, &de) {
		return "internal error"
	}
	kind := kindOf(err)
	head := (&driver.Error{Op: de.Op, Namespace: de.Namespace, Name: de.Name, Kind: kind}).Error()
	var body *bodyError
	if errors.As(de.Err, &body) {
		return head + ": " + body.public()
	}
	switch {
	case errors.Is(err, driver.ErrNotOwned), apierrors.IsNotFound(err):
		// The same words for both; the API server's would name the resource.
		return head
	case errors.Is(err, driver.ErrNotServed):
		// Not the namespaces it serves.
		return fmt.Sprintf("%s: namespace %s is not served by this gateway", head, quoteValue(de.Namespace))
	}
	switch kind {
	case driver.KindNotFound, driver.KindAlreadyExists, driver.KindConflict, driver.KindPrecondition, driver.KindInvalidArgument:
	case driver.KindForbidden:
		if !refusedByAdmission(err) {
			return head
		}
	default:
		return head
	}
	var status apierrors.APIStatus
	if errors.As(de.Err, &status) {
		return head + ": " + status.Status().Message
	}
	return de.Error()
}

// refuse answers code with {"kind", "error", "id"} and logs cause under
// the id, with the caller's user name when it is known; the log line says
// whether the answer was written, as fail's does.
func refuse(w http.ResponseWriter, r *http.Request, log logr.Logger, code int, kind, msg string, cause error) {
	id := requestID(w, r)
	kv := []any{"id", id, "method", r.Method, "path", logPath(r), "status", code}
	if name := userName(r); name != "" {
		kv = append(kv, "user", name)
	}
	if werr := writeAnswer(w, code, map[string]string{"kind": kind, "error": msg, "id": id}); werr != nil {
		kv = append(kv, "answered", false, "writeErr", werr)
	}
	log.Info("request refused", append(kv, "err", cause)...)
}

// maxQuoted is how much of a value an error or a log line quotes.
const maxQuoted = 64

// quoteValue quotes v, cut to its first maxQuoted bytes and its length
// when it is longer: a path of a megabyte is not copied into every answer
// and log line.
func quoteValue(v string) string {
	if len(v) <= maxQuoted {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(v[:maxQuoted]), len(v))
}

// logPath is the request's path for a log line, cut as quoteValue cuts.
func logPath(r *http.Request) string { return cutText(r.URL.Path, 4*maxQuoted) }

// cutText returns s, or its first n bytes and its length when longer.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}
