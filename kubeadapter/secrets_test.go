package kubeadapter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestNoSecretsInOutput: a config whose server URL carries a password and
// that sends a bearer token, through every path that logs, observes or
// fails (answers, a status retried by client-go, a request cut by its
// timeout, a refused connection retried by the stack), never shows either
// secret: not in a log line at the highest verbosity, not in what the
// observers are given (but the request, whose URL is the caller's), not
// in an error, however it is printed.
func TestNoSecretsInOutput(t *testing.T) {
	const password, token = "s3cr3tpass", "t0ps3cr3t-token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body: until then net/http does not watch the
		// connection, and the context of a DELETE would never end.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(r.URL.Path, "/pods"):
			<-r.Context().Done()
		case strings.Contains(r.URL.Path, "/configmaps"):
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			_, _ = fmt.Fprint(w, `{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}`)
		}
	}))
	defer srv.Close()

	var mu sync.Mutex
	var out strings.Builder
	capture := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&out, format+"\n", args...)
	}
	log := funcr.New(func(prefix, args string) { capture("%s %s", prefix, args) }, funcr.Options{Verbosity: 10})
	obs := kubeadapter.ObserverFuncs{
		Attempt: func(a pooltrace.Attempt) { capture("attempt %+v %v", a, a) },
		Decision: func(d retry.Decision) {
			capture("decision %v %v %v %v %v %v %v", d.Attempt, d.Err, d.Class, d.StatusCode, d.Retry, d.Wait, d.Reason)
		},
		Exceeded: func(e timeout.Exceeded) { capture("exceeded %v %v %v", e.Phase, e.Limit, e.Elapsed) },
	}
	for _, host := range []string{srv.URL, transporttest.RefusedURL(t)} {
		cfg := &rest.Config{
			Host:        strings.Replace(host, "http://", "http://user:"+password+"@", 1),
			BearerToken: token,
		}
		require.NoError(t, kubeadapter.Apply(cfg, kubeadapter.WithTimeout(300*time.Millisecond),
			kubeadapter.WithLogger(log), kubeadapter.WithObserver(obs)))
		cs, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		capture("list namespaces: %v | %+v | %#v", err, err, err)
		_, err = cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
		capture("list pods: %v | %+v | %#v", err, err, err)
		_, err = cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
		capture("get configmap: %v | %+v | %#v", err, err, err)
		err = cs.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{})
		capture("delete pod: %v | %+v | %#v", err, err, err)
		cancel()
	}
	mu.Lock()
	text := out.String()
	mu.Unlock()
	require.Contains(t, text, "attempt", "the observers saw the requests")
	require.Contains(t, text, `"msg"="request attempt"`, "the stack logged the requests")
	require.Contains(t, text, "exceeded", "a request ran out of time")
	require.Contains(t, text, "connection refused")
	assert.NotContains(t, text, password)
	assert.NotContains(t, text, token)
}
