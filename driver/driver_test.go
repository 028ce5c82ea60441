package driver_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/internal/drivertest"
	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
)

func TestMain(m *testing.M) {
	drivertest.Main(m)
}

func TestInvalidInputSendsNothing(t *testing.T) {
	a := drivertest.NewAPIServer(t, "v1beta1")
	d := drivertest.NewDriver(t, a, nil)
	ctx := context.Background()
	tests := []struct {
		name    string
		call    func() error
		wantMsg string
	}{
		{"empty name", func() error { _, err := d.Get(ctx, "team-a", ""); return err }, "empty sandbox name"},
		{"not a DNS label", func() error { _, err := d.Stop(ctx, "team-a", "Bad_Name"); return err }, `sandbox name "Bad_Name" is not a DNS label`},
		{"dotted name", func() error { _, err := d.Start(ctx, "team-a", "a.b"); return err }, `sandbox name "a.b" is not a DNS label`},
		{"unknown namespace", func() error { return d.Delete(ctx, "kube-system", "sb") }, `unknown namespace "kube-system"`},
		{"unknown namespace on create", func() error {
			_, err := d.Create(ctx, "other", "sb", driver.CreateSpec{})
			return err
		}, `unknown namespace "other"`},
		{"unknown namespace on list", func() error { _, err := d.List(ctx, "other"); return err }, `unknown namespace "other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			assert.Equal(t, driver.KindInvalidArgument, driver.KindOf(err))
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	assert.Empty(t, a.Requests, "invalid input reached the API server")
}

// TestCreateRejectsBadTemplate: what the Sandbox CRD would reject fails
// before anything is sent, naming the field and the value.
func TestCreateRejectsBadTemplate(t *testing.T) {
	a := drivertest.NewAPIServer(t, "v1beta1")
	d := drivertest.NewDriver(t, a, nil)
	ctr := func(names ...string) driver.CreateSpec {
		var spec driver.CreateSpec
		for _, n := range names {
			spec.PodTemplate.Spec.Containers = append(spec.PodTemplate.Spec.Containers, corev1.Container{Name: n, Image: "busybox"})
		}
		return spec
	}
	tests := []struct {
		name    string
		give    driver.CreateSpec
		wantMsg string
	}{
		{"no pod template", driver.CreateSpec{}, "spec.podTemplate.spec.containers: required"},
		{"unnamed container", ctr(""), `spec.podTemplate.spec.containers[0].name: "" is not a DNS label`},
		{"bad container name", ctr("agent", "Side_Car"), `spec.podTemplate.spec.containers[1].name: "Side_Car" is not a DNS label`},
		{"duplicate container", ctr("agent", "agent"), `spec.podTemplate.spec.containers[1].name: duplicate container name "agent"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Create(context.Background(), "team-a", "sb", tt.give)
			require.Error(t, err)
			assert.Equal(t, driver.KindInvalidArgument, driver.KindOf(err))
			assert.ErrorContains(t, err, tt.wantMsg)
		})
	}
	assert.Zero(t, a.Total(), "bad input reached the API server")
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	_, err := driver.New(cfg, "", []string{"a"})
	assert.EqualError(t, err, `driver: gateway "" is not a valid label value`)
	_, err = driver.New(cfg, "gw", nil)
	assert.EqualError(t, err, "driver: namespaces must not be empty")
	_, err = driver.New(cfg, "gw", []string{"Team_A"})
	assert.EqualError(t, err, `driver: namespace "Team_A" is not a valid namespace name`)
	_, err = driver.New(cfg, "gw", []string{"a"}, driver.WithPageSize(0))
	assert.EqualError(t, err, "driver: WithPageSize must be positive, got 0")
	for _, qps := range []float64{0, -1, math.NaN()} {
		_, err = driver.New(cfg, "gw", []string{"a"}, driver.WithEventLimit(qps, 1))
		assert.EqualError(t, err, fmt.Sprintf("driver: WithEventLimit qps must be positive, got %v", qps))
	}
	_, err = driver.New(cfg, "gw", []string{"a"}, driver.WithEventLimit(math.Inf(1), 0))
	assert.EqualError(t, err, "driver: WithEventLimit burst must be at least 1, got 0")
	_, err = driver.New(cfg, "gw", []string{"a"}, driver.WithEventLimit(math.Inf(1), 1))
	assert.NoError(t, err)
	_, err = driver.New(cfg, "gw", []string{"a"}, driver.WithAdapterOptions(kubeadapter.WithTimeout(0)))
	assert.EqualError(t, err, "kubeadapter: WithTimeout must be positive, got 0s")
	// kubectl proxy serves plain http: no HTTP/2, so no HTTP/2 health check.
	_, err = driver.New(cfg, "gw", []string{"a"}, driver.WithAdapterOptions(kubeadapter.WithHTTP2Health(time.Second, time.Second)))
	assert.EqualError(t, err, "kubeadapter: WithHTTP2Health cannot apply: HTTP/2 is off: the server http://127.0.0.1:1 is plain http, which client-go speaks in HTTP/1.1")
	_, err = driver.New(nil, "gw", []string{"a"})
	assert.Error(t, err)
}

// TestAdapterOptionsOnAppliedConfig: a config the caller already applied
// keeps its stack and that stack's options. New refuses adapter options it
// could not apply; they were dropped without a word (an observer given
// this way saw no attempt). Without adapter options such a config is
// taken as it is.
func TestAdapterOptionsOnAppliedConfig(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	require.NoError(t, kubeadapter.Apply(cfg))
	_, err := driver.New(cfg, "gw", []string{"a"}, driver.WithAdapterOptions(kubeadapter.WithTimeout(time.Second)))
	assert.EqualError(t, err, "driver: WithAdapterOptions cannot apply: the rest.Config already carries kubeadapter's stack, whose options stay; give them to that kubeadapter.Apply, or give New the config without it")
	d, err := driver.New(cfg, "gw", []string{"a"})
	require.NoError(t, err)
	d.Close()
}

func TestStopIsANoOpWhenStopped(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", false)
	d := drivertest.NewDriver(t, a, nil)
	s, err := d.Stop(context.Background(), "team-a", "sb-0")
	require.NoError(t, err)
	assert.Equal(t, driver.PhaseStopped, s.Phase)
	assert.Zero(t, a.Mutations(), "a patch that would change nothing is not sent")
}

func TestStartRecordsCurrentFence(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", false)
	d := drivertest.NewDriver(t, a, nil)
	s, err := d.Start(context.Background(), "team-a", "sb-1")
	require.NoError(t, err)
	assert.True(t, s.Running)
	assert.Equal(t, driver.Fence{UID: "fence-a", Generation: 2}, s.Fence)
	assert.False(t, s.BootstrapStarted.IsZero())
	assert.Equal(t, 1, a.Count("PATCH patch"))
}

func TestGetNotOwned(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	a.Mu.Lock()
	a.Sandboxes["team-a/sb-0"]["metadata"].(map[string]any)["labels"] = map[string]any{driver.LabelGateway: "other"}
	a.Mu.Unlock()
	d := drivertest.NewDriver(t, a, nil)
	_, err := d.Stop(context.Background(), "team-a", "sb-0")
	require.Error(t, err)
	assert.Equal(t, driver.KindPrecondition, driver.KindOf(err))
	assert.Zero(t, a.Mutations(), "a sandbox of another gateway is not touched")
}

func TestGetNotFound(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	d := drivertest.NewDriver(t, a, nil)
	_, err := d.Get(context.Background(), "team-a", "missing")
	assert.Equal(t, driver.KindNotFound, driver.KindOf(err))
	assert.Contains(t, err.Error(), "driver: get sandbox team-a/missing: not found")
}

// TestForbidden: a 403 from the authorizer is KindForbidden, not
// internal, and keeps the API server's message, which names what RBAC
// lacks.
func TestForbidden(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	const msg = `sandboxes.agents.x-k8s.io "sb-0" is forbidden: User "gateway" cannot patch resource "sandboxes" in API group "agents.x-k8s.io" in the namespace "team-a"`
	a.Fail = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPatch {
			return false
		}
		drivertest.Status(w, http.StatusForbidden, "Forbidden", msg)
		return true
	}
	_, err := drivertest.NewDriver(t, a, nil).Stop(context.Background(), "team-a", "sb-0")
	require.Error(t, err)
	assert.Equal(t, driver.KindForbidden, driver.KindOf(err))
	assert.Equal(t, "driver: stop sandbox team-a/sb-0: forbidden: "+msg, err.Error())
}

// TestErrorKeepsChain: a timeout keeps context.DeadlineExceeded, the
// kubewire timeout error and the connection facts in the driver's error.
func TestErrorKeepsChain(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	var attempts atomic.Int32
	d := drivertest.NewDriver(t, a, nil, driver.WithAdapterOptions(
		kubeadapter.WithTimeout(200*time.Millisecond),
		kubeadapter.WithObserver(kubeadapter.ObserverFuncs{Attempt: func(pooltrace.Attempt) { attempts.Add(1) }}),
	))
	_, err := d.Get(context.Background(), "team-a", "sb-0") // warm the pool
	require.NoError(t, err)
	a.Mu.Lock()
	a.Fail = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPatch {
			<-r.Context().Done()
			return true
		}
		return false
	}
	a.Mu.Unlock()
	_, err = d.Stop(context.Background(), "team-a", "sb-0")
	require.Error(t, err)
	assert.Equal(t, driver.KindUnavailable, driver.KindOf(err))
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "driver: stop sandbox team-a/sb-0: unavailable: "), msg)
	assert.Contains(t, msg, "on connection reused after")
	assert.Contains(t, msg, "request timeout of 200ms exceeded")
	assert.Contains(t, msg, "retry: PATCH failed after 3 attempts", "stop is marked idempotent, so its patch was retried")
}

// TestDeleteGoneIsSuccess: the first DELETE runs but its answer is lost;
// the retried DELETE finds the sandbox gone, which is success.
func TestDeleteGoneIsSuccess(t *testing.T) {
	a := drivertest.StaleFixture(t, "v1beta1", true)
	d := drivertest.NewDriver(t, a, nil)
	var deletes atomic.Int32
	a.Mu.Lock()
	a.Fail = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodDelete {
			return false
		}
		assert.Contains(t, r.Header.Get("Content-Type")+drivertest.ReadBody(r), "uid-sb-0", "the delete carries a uid precondition")
		if deletes.Add(1) == 1 {
			a.Mu.Lock()
			delete(a.Sandboxes, "team-a/sb-0")
			a.Mu.Unlock()
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.Close() // executed, answer lost
			}
			return true
		}
		drivertest.Status(w, 404, "NotFound", "sandboxes not found")
		return true
	}
	a.Mu.Unlock()
	require.NoError(t, d.Delete(context.Background(), "team-a", "sb-0"))
	assert.EqualValues(t, 2, deletes.Load(), "the marked delete was retried")
}
