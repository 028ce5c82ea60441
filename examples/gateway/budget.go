package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/lru"
)

// limits bound the reviews the gate sends, so that a flood of tokens the
// API server rejects, which no cache keeps, spends its own budget and not
// that of the callers the gate has let in, as kube-apiserver's Priority
// and Fairness isolates one flow from another.
type limits struct {
	// reviewQPS and reviewBurst are the review clients' own limit: every
	// TokenReview and SubjectAccessReview the gate sends. A review the
	// limit would hold past its deadline is answered 503, never 401.
	reviewQPS   float32
	reviewBurst int
	// unknownQPS and unknownBurst bound the TokenReviews of tokens the
	// gate has not accepted in the last knownFor, from every address
	// together: half the review clients' limit, so that the callers it has
	// let in, whose tokens it knows, and their SubjectAccessReviews always
	// have the other half. Over it, 503.
	unknownQPS   float64
	unknownBurst int
	// clientQPS and clientBurst bound, per client address, the reviews
	// the caches do not answer: TokenReviews of unknown tokens and
	// SubjectAccessReviews. Over it, 429 with Retry-After.
	clientQPS   float64
	clientBurst int
}

// defaultLimits: client-go's default review limit (5 a second) would let
// one client that sends garbage tokens starve every caller's reviews.
var defaultLimits = limits{
	reviewQPS: 50, reviewBurst: 100,
	unknownQPS: 25, unknownBurst: 50,
	clientQPS: 10, clientBurst: 20,
}

// knownFor is how long the gate remembers a token the API server accepted,
// so that its next review, when the authenticator's cache has let it go,
// does not wait behind unknown tokens; it is reviewed all the same.
// maxKnown and maxClients bound the memory the gate keeps for tokens and
// client addresses (least recently used go first).
const (
	knownFor   = 10 * time.Minute
	maxKnown   = 10000
	maxClients = 10000
)

// clientAddress is the IP address a request came from, the flow its
// reviews are budgeted by. Behind a proxy that terminates the connection
// it is the proxy's: the gate does not trust X-Forwarded-For, which any
// caller can set.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

type clientKey struct{}

func withClient(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientKey{}, addr)
}

var (
	// errClientBudget: the client address has spent its review budget.
	errClientBudget = errors.New("this client address sends more reviews than its budget allows")
	// errUnknownBudget: the tokens not yet seen, from every address, have
	// spent their budget.
	errUnknownBudget = errors.New("too many tokens the gateway has not seen need a review")
	// errReviewThrottled: the review clients' own limit left no time.
	errReviewThrottled = errors.New("the review clients' rate limit left no time for the review")
)

// budget keeps the gate's review budgets and the tokens it has accepted.
type budget struct {
	lim     limits
	mu      sync.Mutex    // guards the limiters
	unknown *rate.Limiter // every unknown token's
	clients *lru.Cache    // address -> *rate.Limiter
	tokens  *lru.Cache    // sha256 of a token -> time.Time it is known until
	now     func() time.Time
}

func newBudget(lim limits) *budget {
	return &budget{
		lim:     lim,
		unknown: rate.NewLimiter(rate.Limit(lim.unknownQPS), lim.unknownBurst),
		clients: lru.New(maxClients),
		tokens:  lru.New(maxKnown),
		now:     time.Now,
	}
}

// admitUnknown takes a review of an unknown token from client's budget
// and from that of all unknown tokens, or returns the error of the one
// that has none left, taking from neither.
func (b *budget) admitUnknown(client string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, now := b.client(client), b.now()
	switch {
	case c.TokensAt(now) < 1:
		return errClientBudget
	case b.unknown.TokensAt(now) < 1:
		return errUnknownBudget
	}
	c.AllowN(now, 1)
	b.unknown.AllowN(now, 1)
	return nil
}

// admitReview takes a review the caches did not answer from client's
// budget.
func (b *budget) admitReview(client string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.client(client).AllowN(b.now(), 1) {
		return errClientBudget
	}
	return nil
}

// client returns the limiter of the client address addr. The limiters are
// used under b.mu only, with the time read under it too: a limiter given
// times out of order counts the refill between them twice.
func (b *budget) client(addr string) *rate.Limiter {
	if v, ok := b.clients.Get(addr); ok {
		return v.(*rate.Limiter)
	}
	l := rate.NewLimiter(rate.Limit(b.lim.clientQPS), b.lim.clientBurst)
	b.clients.Add(addr, l)
	return l
}

func (b *budget) known(token string) bool {
	v, ok := b.tokens.Get(sha256.Sum256([]byte(token)))
	return ok && b.now().Before(v.(time.Time))
}

func (b *budget) remember(token string) {
	b.tokens.Add(sha256.Sum256([]byte(token)), b.now().Add(knownFor))
}

func (b *budget) forget(token string) {
	b.tokens.Remove(sha256.Sum256([]byte(token)))
}

// reviewLimiter is client-go's token bucket with an error of its own for a
// wait the deadline does not leave time for; client-go wraps it (%w), and
// the gate answers 503 for it rather than take it for a rejected token.
type reviewLimiter struct{ flowcontrol.RateLimiter }

func (l reviewLimiter) Wait(ctx context.Context) error {
	if err := l.RateLimiter.Wait(ctx); err != nil {
		return fmt.Errorf("%w: %w", errReviewThrottled, err)
	}
	return nil
}

// budgetedSAR is the authorizer's client: each SubjectAccessReview its
// cache does not answer is taken from the budget of the client address in
// the request's context.
type budgetedSAR struct {
	authorizationv1client.AuthorizationV1Interface
	b *budget
}

func (c budgetedSAR) SubjectAccessReviews() authorizationv1client.SubjectAccessReviewInterface {
	return budgetedSARs{c.AuthorizationV1Interface.SubjectAccessReviews(), c.b}
}

type budgetedSARs struct {
	authorizationv1client.SubjectAccessReviewInterface
	b *budget
}

func (c budgetedSARs) Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	if client, ok := ctx.Value(clientKey{}).(string); ok {
		if err := c.b.admitReview(client); err != nil {
			return nil, err
		}
	}
	return c.SubjectAccessReviewInterface.Create(ctx, sar, opts)
}
