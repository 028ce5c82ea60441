package contract_test

import (
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/kubewire/kubewire/internal/contract"
	"github.com/kubewire/kubewire/internal/roundtrip"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// passThrough is the least a middleware can be: it hands every request to
// the RoundTripper it wraps. The suite must pass it, or it asks more of
// middleware than net/http itself gives.
type passThrough struct {
	roundtrip.Wrapped
}

func (p passThrough) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.Next.RoundTrip(req)
}

func TestContract(t *testing.T) {
	contract.Run(t, func(rt http.RoundTripper) http.RoundTripper { return passThrough{roundtrip.Wrap(rt)} })
}
