package drivertest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubewire/kubewire/kubeadapter"
)

// Fault makes f's clients answer each request of verb on resource (as
// [Fake.Count] names them) with the error fail returns for it; nil passes
// the request on. Sandboxes and discovery (resource "resource", as
// client-go's fake names it) are agent-sandbox's clientset's, every other
// resource client-go's. It may be called while the clients are in use: it
// takes the clientset's lock, as each request does, to add its reactor.
// fail runs under that lock, which serializes the clientset's requests: it
// may block, to hold a request, and call [Fake.Change], but not f's
// clients or [Fake.Count]. It is called on the goroutine of the request:
// it must not call t.FailNow.
func (f *Fake) Fault(verb, resource string, fail func(k8stesting.Action) error) {
	reactor := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if err := fail(a); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	}
	c := &f.Kube.Fake
	if resource == "sandboxes" || resource == "resource" {
		c = &f.Sandboxes.Fake
	}
	// client-go's PrependReactor takes no lock; Invokes reads the chain
	// under this one.
	c.Lock()
	defer c.Unlock()
	c.PrependReactor(verb, resource, reactor)
}

// Reset is the error client-go returns for a request whose connection was
// reset before an answer came: no answer, the state is unknown.
func Reset(a k8stesting.Action) error {
	return transport(a, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
}

// Timeout is the error client-go returns for a request that got no answer
// in time: a net.Error whose Timeout is true.
func Timeout(a k8stesting.Action) error {
	return transport(a, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
}

// transport wraps err as net/http's client does, in a *url.Error naming
// the request.
func transport(a k8stesting.Action, err error) error {
	path := "/" + a.GetResource().Resource
	if ns := a.GetNamespace(); ns != "" {
		path = "/namespaces/" + ns + path
	}
	method := map[string]string{"get": "Get", "list": "Get", "watch": "Get", "create": "Post", "update": "Put", "patch": "Patch", "delete": "Delete"}[a.GetVerb()]
	return &url.Error{Op: method, URL: "https://127.0.0.1:6443/apis/" + a.GetResource().GroupVersion().String() + path, Err: err}
}

// Change writes the stored sandbox ns/name as another client would: change
// edits a copy, and the resourceVersion moves on, and the generation too
// when the spec changed. Watches of f see the update. It may be called
// from a [Fake.Fault] function.
func (f *Fake) Change(ns, name string, change func(runtime.Object)) error {
	tracker := f.Sandboxes.Tracker()
	obj, err := tracker.Get(f.resource(), ns, name)
	if err != nil {
		return err
	}
	out := obj.DeepCopyObject()
	change(out)
	m, err := meta.Accessor(out)
	if err != nil {
		return err
	}
	m.SetResourceVersion(f.nextRV())
	if !reflect.DeepEqual(spec(obj), spec(out)) {
		m.SetGeneration(m.GetGeneration() + 1)
	}
	return tracker.Update(f.resource(), out, ns)
}

// Paginate makes f answer a list of sandboxes that sets a limit as the API
// server does: one page at a time, of the objects the label selector
// matches in name order, with a continue token for the next page.
// client-go's fake tracker answers with every object at once. Like
// [Fake.Fault], it may be called while the clients are in use.
func (f *Fake) Paginate() {
	f.Sandboxes.Lock()
	defer f.Sandboxes.Unlock()
	f.Sandboxes.PrependReactor("list", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l, ok := a.(k8stesting.ListActionImpl)
		if !ok || l.GetResource().Version != f.Version || l.ListOptions.Limit <= 0 {
			return false, nil, nil
		}
		list, err := f.Sandboxes.Tracker().List(f.resource(), f.resource().GroupVersion().WithKind("Sandbox"), l.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return true, nil, err
		}
		selector := l.GetListRestrictions().Labels
		if selector == nil {
			selector = labels.Everything()
		}
		items = slices.DeleteFunc(items, func(o runtime.Object) bool {
			m, err := meta.Accessor(o)
			return err != nil || !selector.Matches(labels.Set(m.GetLabels()))
		})
		slices.SortFunc(items, func(a, b runtime.Object) int {
			ma, _ := meta.Accessor(a)
			mb, _ := meta.Accessor(b)
			return strings.Compare(ma.GetNamespace()+"/"+ma.GetName(), mb.GetNamespace()+"/"+mb.GetName())
		})
		from := 0
		if c := l.ListOptions.Continue; c != "" {
			if from, err = strconv.Atoi(c); err != nil || from < 0 || from > len(items) {
				return true, nil, fmt.Errorf("drivertest: bad continue token %q", c)
			}
		}
		to := min(from+int(l.ListOptions.Limit), len(items))
		if err := meta.SetList(list, items[from:to]); err != nil {
			return true, nil, err
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return true, nil, err
		}
		if to < len(items) {
			lm.SetContinue(strconv.Itoa(to))
		}
		return true, list, nil
	})
}

// LoseAnswers makes the next n merge patches of sandboxes apply, then
// answer as kubeadapter answers a copy it sent again after the first
// copy's answer was lost: 409 Conflict, with the cause
// kubeadapter.IsMaybeApplied reads.
func (f *Fake) LoseAnswers(n int) {
	var lost atomic.Int32
	reactor := func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, _, err := f.patch(a)
		if !handled || err != nil {
			return handled, nil, err
		}
		if lost.Add(1) > int32(n) {
			// Applied, and answered as the API server answers.
			obj, err := f.Sandboxes.Tracker().Get(a.GetResource(), a.GetNamespace(), a.(k8stesting.PatchAction).GetName())
			return true, obj, err
		}
		p := a.(k8stesting.PatchAction)
		conflict := apierrors.NewConflict(p.GetResource().GroupResource(), p.GetName(), errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		conflict.ErrStatus.Details.Causes = append(conflict.ErrStatus.Details.Causes, metav1.StatusCause{Type: kubeadapter.CauseTypeMaybeApplied})
		return true, nil, conflict
	}
	f.Sandboxes.Lock()
	defer f.Sandboxes.Unlock()
	f.Sandboxes.PrependReactor("patch", "sandboxes", reactor)
}
