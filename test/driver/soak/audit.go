package soak

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/kubewire/kubewire/kubeadapter"
)

// AuditPolicy is the kube-apiserver audit policy of a soak. Every request
// is logged once, when its response is complete (or the handler
// panicked). Writes of sandboxes and network policies, and gets of
// sandboxes, carry their request and response bodies: the checker
// compares request bodies to find a write sent twice, and reads the
// objects the API server answered, every version anyone saw. Everything
// else carries its metadata.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: RequestResponse
  verbs: ["get", "create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: agents.x-k8s.io
    resources: ["sandboxes", "sandboxes/status"]
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: networking.k8s.io
    resources: ["networkpolicies"]
- level: Metadata
`

// What the driver writes on the cluster, its contract with every reader
// of the objects: the fence a sandbox was admitted under, in two
// annotations, and the name of each namespace's fence (the driver's
// default).
const (
	annotationFenceUID        = "kubewire.io/fence-uid"
	annotationFenceGeneration = "kubewire.io/fence-generation"
	fenceName                 = "sandbox-workload-fence"
)

// Event is what the checker reads of one audit event.
type Event struct {
	AuditID     string
	Verb        string
	User        string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// Code is the response's HTTP status; 0 if the handler panicked.
	Code     int32
	Received time.Time
	// BodyHash identifies the request body, for writes whose body the
	// policy logs; empty otherwise.
	BodyHash string
	// Object is the object a successful write of a sandbox or network
	// policy returned.
	Object *Object
}

// Object is what the checker reads of a sandbox or network policy.
type Object struct {
	UID             string
	ResourceVersion string
	Generation      int64
	// Sandboxes only: the intent and the fence it was admitted under.
	Running         bool
	FenceUID        string
	FenceGeneration int64
}

// write reports whether the event is a write.
func (e Event) write() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// ok reports whether the API server answered 2xx.
func (e Event) ok() bool { return e.Code >= 200 && e.Code < 300 }

// maybe reports whether a write may have been applied though the API
// server answered no success: it answers 504 when the client went away
// while the write was in flight (the handler stops waiting; the storage
// write goes on), 5xx on other trouble, nothing if the handler panicked.
func (e Event) maybe() bool { return e.Code == 0 || e.Code >= 500 }

// ReadAudit reads an audit log in the JSON format of audit.k8s.io/v1,
// keeping the events of the ResponseComplete and Panic stages.
func ReadAudit(r io.Reader) ([]Event, error) {
	var out []Event
	dec := json.NewDecoder(r)
	for n := 1; ; n++ {
		var ev auditv1.Event
		err := dec.Decode(&ev)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("audit event %d: %w", n, err)
		}
		if ev.Stage != auditv1.StageResponseComplete && ev.Stage != auditv1.StagePanic {
			continue
		}
		e := Event{
			AuditID:  string(ev.AuditID),
			Verb:     ev.Verb,
			User:     ev.User.Username,
			Received: ev.RequestReceivedTimestamp.Time,
		}
		if ev.ResponseStatus != nil {
			e.Code = ev.ResponseStatus.Code
		}
		if ref := ev.ObjectRef; ref != nil {
			e.Resource, e.Subresource, e.Namespace, e.Name = ref.Resource, ref.Subresource, ref.Namespace, ref.Name
		}
		if ev.RequestObject != nil && len(ev.RequestObject.Raw) > 0 {
			sum := sha256.Sum256(ev.RequestObject.Raw)
			e.BodyHash = hex.EncodeToString(sum[:12])
		}
		if ev.ResponseObject != nil && (e.write() || e.Verb == "get") && e.ok() {
			if e.Object, err = readObject(ev.ResponseObject.Raw); err != nil {
				return nil, fmt.Errorf("audit event %d (%s %s %s/%s): %w", n, e.Verb, e.Resource, e.Namespace, e.Name, err)
			}
		}
		out = append(out, e)
	}
}

// readObject reads the fields of a sandbox or network policy the checker
// needs. A Status (what a delete answers) gives the uid of the object it
// names, if any.
func readObject(raw []byte) (*Object, error) {
	var o struct {
		Kind    string `json:"kind"`
		Details struct {
			UID string `json:"uid"`
		} `json:"details"`
		Metadata struct {
			UID             string            `json:"uid"`
			ResourceVersion string            `json:"resourceVersion"`
			Generation      int64             `json:"generation"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			OperatingMode string `json:"operatingMode"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, err
	}
	if o.Kind == "Status" {
		// A delete's answer: only the uid of the object it removed.
		if o.Details.UID == "" {
			return nil, nil
		}
		return &Object{UID: o.Details.UID}, nil
	}
	if o.Metadata.UID == "" {
		return nil, nil
	}
	obj := &Object{UID: o.Metadata.UID, ResourceVersion: o.Metadata.ResourceVersion, Generation: o.Metadata.Generation}
	if o.Kind == "Sandbox" {
		// operatingMode defaults to Running.
		obj.Running = o.Spec.OperatingMode != "Suspended"
		obj.FenceUID = o.Metadata.Annotations[annotationFenceUID]
		if g := o.Metadata.Annotations[annotationFenceGeneration]; g != "" {
			gen, err := strconv.ParseInt(g, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("annotation %s: %w", annotationFenceGeneration, err)
			}
			obj.FenceGeneration = gen
		}
	}
	return obj, nil
}

// state is the sandbox state the object shows.
func (o *Object) state() State {
	return State{Exists: true, UID: o.UID, ResourceVersion: o.ResourceVersion, Running: o.Running, FenceUID: o.FenceUID, FenceGeneration: o.FenceGeneration}
}

type opKey struct{}

// ContextWithOp returns a context whose API requests [Stamp] marks as operation
// op's.
func ContextWithOp(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// OpFromContext returns the operation that ctx carries.
func OpFromContext(ctx context.Context) (string, bool) {
	op, ok := ctx.Value(opKey{}).(string)
	return op, ok
}

// Stamp is a client-go WrapperFunc, for the soak's own clients (the
// gateway's requests are stamped by [apiProxy]): it sets the Audit-ID header of every
// request whose context carries an operation ([ContextWithOp]) to
// [AuditID] of that operation, marked when kubeadapter.Resendable
// (Kubernetes' rule, which the gateway's stack retries by) says the
// request may be re-sent. kube-apiserver records a client's Audit-ID as
// it is (k8s.io/apiserver's WithAuditInit), so every copy of a request,
// and every request of one operation, is found under its operation in the
// audit log. Other requests pass unchanged.
func Stamp(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &stamp{Next: next}
}

type stamp struct{ Next http.RoundTripper }

// WrappedRoundTripper returns the RoundTripper beneath, as client-go's
// wrappers do.
func (s *stamp) WrappedRoundTripper() http.RoundTripper { return s.Next }

// CloseIdleConnections closes the idle connections of the RoundTripper
// beneath.
func (s *stamp) CloseIdleConnections() {
	if c, ok := s.Next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (s *stamp) RoundTrip(req *http.Request) (*http.Response, error) {
	op, ok := OpFromContext(req.Context())
	if !ok {
		return s.Next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	// Resendable reads a write's body (through GetBody) on every request
	// here, where the stack reads it only after a failure: a soak's cost.
	r.Header.Set("Audit-ID", AuditID(op, kubeadapter.Resendable(req)))
	return s.Next.RoundTrip(r)
}
