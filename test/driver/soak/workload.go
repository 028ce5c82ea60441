package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// OpHeader carries a client operation's ID to the gateway, which sends
// it as the Audit-ID of every API request it makes for the operation.
const OpHeader = "X-Request-Id"

// endOfRun begins the error of an operation the end of the run cut short.
const endOfRun = "end of run: "

// belief is what a client believes of one of its sandboxes.
type belief int

const (
	believeUnknown belief = iota
	believeAbsent
	believeRunning
	believeStopped
)

// workload is the clients of the gateway's HTTP API and the fence changer.
type workload struct {
	url       string
	namespace string
	http      *http.Client
	rec       *Recorder
	seq       atomic.Int64
	quiet     *sync.RWMutex
	timeout   time.Duration
	kinds     []Kind
	// template is the pod template of every create.
	template string
}

func (w *workload) nextID() string { return OpID(w.seq.Add(1)) }

// client runs one client until ctx is done: it owns its sandboxes, so the
// operations on each are sequential, and chooses each operation from what
// it believes of the sandbox, as a user would, with a few that must fail.
func (w *workload) client(ctx context.Context, id int, seed int64, sandboxes int) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(id)))
	names := make([]string, sandboxes)
	beliefs := make([]belief, sandboxes)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d-s%d", id, i)
		beliefs[i] = believeAbsent
	}
	for ctx.Err() == nil {
		i := rng.IntN(sandboxes)
		kind := w.choose(rng, beliefs[i])
		w.quiet.RLock()
		op := w.do(ctx, id, kind, names[i])
		w.quiet.RUnlock()
		if ctx.Err() != nil && op.Outcome == Unknown {
			// Cut short by the end of the run, not by a fault.
			op.Error = endOfRun + op.Error
		}
		w.rec.Record(op)
		beliefs[i] = update(beliefs[i], op)
		sleep(ctx, time.Duration(rng.IntN(50))*time.Millisecond)
	}
}

// choose picks the next operation on a sandbox.
func (w *workload) choose(rng *rand.Rand, b belief) Kind {
	var weights map[Kind]int
	switch b {
	case believeUnknown:
		weights = map[Kind]int{Get: 1}
	case believeAbsent:
		weights = map[Kind]int{Create: 85, Get: 5, Stop: 3, Start: 3, Delete: 4}
	case believeRunning:
		weights = map[Kind]int{Stop: 35, Get: 25, Delete: 20, Start: 12, Create: 8}
	case believeStopped:
		weights = map[Kind]int{Start: 40, Get: 20, Delete: 25, Stop: 10, Create: 5}
	}
	total := 0
	for _, k := range w.kinds {
		total += weights[k]
	}
	if total == 0 {
		return w.kinds[rng.IntN(len(w.kinds))]
	}
	n := rng.IntN(total)
	for _, k := range w.kinds {
		if n < weights[k] {
			return k
		}
		n -= weights[k]
	}
	return Get
}

// update is what a client believes after op.
func update(b belief, op Op) belief {
	switch op.Outcome {
	case OK:
		switch {
		case op.Kind == Delete:
			return believeAbsent
		case op.State == nil:
			return believeUnknown
		case op.State.Running:
			return believeRunning
		}
		return believeStopped
	case Fail:
		if op.Status == http.StatusNotFound {
			return believeAbsent
		}
		if op.Kind == Create {
			return believeUnknown
		}
		return b
	}
	return believeUnknown
}

// do sends one operation to the gateway and returns it with its answer.
func (w *workload) do(ctx context.Context, client int, kind Kind, name string) Op {
	op := Op{ID: w.nextID(), Client: client, Kind: kind, Name: name}
	base := w.url + "/v1/namespaces/" + w.namespace + "/sandboxes"
	method, url, body := http.MethodPost, base+"/"+name+"/"+string(kind), ""
	switch kind {
	case Create:
		url, body = base, fmt.Sprintf(`{"name":%q,"podTemplate":%s}`, name, w.template)
	case Get:
		method, url = http.MethodGet, base+"/"+name
	case Delete:
		method, url = http.MethodDelete, base+"/"+name
	}
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	op.Start = time.Now()
	req, err := http.NewRequestWithContext(rctx, method, url, strings.NewReader(body))
	if err != nil {
		op.Outcome, op.Error = Unknown, err.Error()
		op.End = time.Now()
		return op
	}
	req.Header.Set(OpHeader, op.ID)
	resp, err := w.http.Do(req)
	if err != nil {
		op.Outcome, op.Error, op.End = Unknown, err.Error(), time.Now()
		return op
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	op.End = time.Now()
	op.Status = resp.StatusCode
	if err != nil {
		op.Outcome, op.Error = Unknown, err.Error()
		return op
	}
	switch {
	case resp.StatusCode/100 == 2:
		op.Outcome = OK
		if kind != Delete {
			var v struct {
				UID             string `json:"uid"`
				Running         bool   `json:"running"`
				FenceUID        string `json:"fenceUID"`
				FenceGeneration int64  `json:"fenceGeneration"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				op.Outcome, op.Error = Unknown, fmt.Sprintf("answer %q: %v", b, err)
				return op
			}
			op.State = &State{Exists: true, UID: v.UID, Running: v.Running, FenceUID: v.FenceUID, FenceGeneration: v.FenceGeneration}
		}
	case slices.Contains([]int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusPreconditionFailed}, resp.StatusCode):
		op.Outcome, op.Error = Fail, strings.TrimSpace(string(b))
	default:
		op.Outcome, op.Error = Unknown, strings.TrimSpace(string(b))
	}
	return op
}

// fencer changes the fence of the namespace, as an administrator does,
// directly against the API server, at rate changes a minute; the gateway
// creates the fence, so a fencer that finds none waits.
func (w *workload) fencer(ctx context.Context, cs kubernetes.Interface, seed int64, rate float64) {
	if rate <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xfe))
	for {
		sleep(ctx, time.Duration(rng.ExpFloat64()*float64(time.Minute)/rate))
		if ctx.Err() != nil {
			return
		}
		w.quiet.RLock()
		op, ok := w.changeFence(ctx, cs)
		w.quiet.RUnlock()
		if ok {
			w.rec.Record(op)
		}
	}
}

// changeFence toggles the fence's Ingress policy type: a change of spec,
// so a new generation.
func (w *workload) changeFence(ctx context.Context, cs kubernetes.Interface) (Op, bool) {
	op := Op{ID: w.nextID(), Client: -1, Kind: Fence, Start: time.Now()}
	ctx = ContextWithOp(ctx, op.ID)
	policies := cs.NetworkingV1().NetworkPolicies(w.namespace)
	np, err := policies.Get(ctx, fenceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Op{}, false
	}
	if err == nil {
		if i := slices.Index(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress); i >= 0 {
			np.Spec.PolicyTypes = slices.Delete(np.Spec.PolicyTypes, i, i+1)
		} else {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		}
		np, err = policies.Update(ctx, np, metav1.UpdateOptions{})
	}
	op.End = time.Now()
	var status apierrors.APIStatus
	switch {
	case err == nil:
		op.Outcome, op.Status = OK, http.StatusOK
		op.State = &State{FenceUID: string(np.UID), FenceGeneration: np.Generation}
	case errors.As(err, &status) && status.Status().Code < 500:
		op.Outcome, op.Status, op.Error = Fail, int(status.Status().Code), err.Error()
	default:
		op.Outcome, op.Error = Unknown, err.Error()
	}
	return op, true
}
