package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// The gateway's own API, as RBAC sees it: callers are granted these verbs
// on the resource sandboxes of this group in a namespace (rbac/caller.yaml),
// not write access to agent-sandbox's Sandboxes, which the gateway uses
// with its own rights.
const (
	apiGroup   = "gateway.kubewire.io"
	apiVersion = "v1"
)

// cacheTTL is how long the delegating authenticator and authorizer keep an
// answer: k8s.io/apiserver's default for delegated authentication and
// authorization (options.NewDelegatingAuthenticationOptions and
// NewDelegatingAuthorizationOptions), so that a caller's token, and each
// verb on each sandbox it asked about, cost the API server nothing for
// 10s. A token the API server rejected is not kept: the authenticator
// caches no error.
const cacheTTL = 10 * time.Second

const (
	reviewTimeout   = 10 * time.Second
	realm           = `Bearer realm="kubewire-gateway"`
	kindUnauthn     = "unauthenticated"
	kindDenied      = "forbidden"
	kindUnavailable = "unavailable"
	kindThrottled   = "throttled"
	kindInvalid     = "invalid argument"
)

// reviewBackoff is k8s.io/apiserver's DefaultAuthWebhookRetryBackoff: a
// TokenReview or SubjectAccessReview that fails is tried again up to five
// times, 500ms apart and growing.
func reviewBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// gate lets in only whom the cluster lets in, as kube-rbac-proxy and
// controller-runtime's secure metrics do: a caller's bearer token is
// checked by the API server (TokenReview) and each request is authorized
// by it (SubjectAccessReview), through k8s.io/apiserver's delegating
// authenticator and authorizer, which cache the answers. A nil *gate lets
// everyone in (-authenticate=false).
type gate struct {
	authn     authenticator.Request
	authz     authorizer.Authorizer
	audiences authenticator.Audiences
	log       logr.Logger
	budget    *budget
}

// newGate returns the gate that asks the API server behind cfg, keeping
// answers for ttl. A token is accepted only if it was issued for one of
// audiences, when there are any; else for the API server's own, which a
// caller then shares with the gateway.
func newGate(cfg *rest.Config, audiences []string, ttl time.Duration, log logr.Logger) (*gate, error) {
	return newGateWith(cfg, audiences, ttl, defaultLimits, log)
}

// newGateWith is newGate with lim bounding the reviews.
func newGateWith(cfg *rest.Config, audiences []string, ttl time.Duration, lim limits, log logr.Logger) (*gate, error) {
	rc := rest.CopyConfig(cfg)
	rc.RateLimiter = reviewLimiter{flowcontrol.NewTokenBucketRateLimiter(lim.reviewQPS, lim.reviewBurst)}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	b := newBudget(lim)
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      reviewBackoff(),
		CacheTTL:                 ttl,
		APIAudiences:             audiences,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: budgetedSAR{kube.AuthorizationV1(), b},
		AllowCacheTTL:             ttl,
		DenyCacheTTL:              ttl,
		WebhookRetryBackoff:       reviewBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("authorization: %w", err)
	}
	return &gate{authn: authn, authz: authz, audiences: audiences, log: log, budget: b}, nil
}

// authenticate answers 401, with WWW-Authenticate, a request without
// credentials or with a token the API server does not accept, before
// anything else reads it; it puts the caller's user in the context of one
// it accepts. A token the gate has not accepted lately is reviewed only
// within its client address's budget and the budget of all unknown tokens
// (see [limits]): 429 or 503, with Retry-After, beyond them. The token is
// never logged: the authenticator removes the Authorization header from a
// request it accepts, and its errors do not quote it.
func (g *gate) authenticate(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientAddress(r)
		r = r.WithContext(withClient(r.Context(), client))
		if len(g.audiences) > 0 {
			r = r.WithContext(authenticator.WithAudiences(r.Context(), g.audiences))
		}
		token, hasToken := bearerToken(r)
		known := hasToken && g.budget.known(token)
		if hasToken && !known {
			if err := g.budget.admitUnknown(client); err != nil {
				g.throttled(w, r, "the caller's token could not be checked", err)
				return
			}
		}
		resp, ok, err := g.authn.AuthenticateRequest(r)
		switch {
		case ok:
			if hasToken {
				g.budget.remember(token)
			}
			next.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), resp.User)))
		case unanswered(err):
			// The API server did not say: a caller told 401 would blame
			// its token.
			g.throttled(w, r, "the caller's token could not be checked", fmt.Errorf("authenticating: %w", err))
		default:
			if err == nil {
				err = errors.New("no credentials")
			}
			if hasToken {
				// A token rejected now is unknown again, whatever it was.
				g.budget.forget(token)
			}
			w.Header().Set("WWW-Authenticate", realm)
			refuse(w, r, g.log, http.StatusUnauthorized, kindUnauthn, "the request carries no bearer token the API server accepts", err)
		}
	})
}

// throttled answers a request the gate could not decide on: 429 when its
// client address spent its budget, else 503, each with Retry-After.
func (g *gate) throttled(w http.ResponseWriter, r *http.Request, msg string, err error) {
	w.Header().Set("Retry-After", "1")
	if errors.Is(err, errClientBudget) {
		refuse(w, r, g.log, http.StatusTooManyRequests, kindThrottled, "too many requests from this address need a review by the API server; retry later", err)
		return
	}
	refuse(w, r, g.log, http.StatusServiceUnavailable, kindUnavailable, msg, err)
}

// bearerToken returns the request's bearer token as the API server's
// bearer token authenticator reads it, and whether there is one: a request
// without one costs no review.
func bearerToken(r *http.Request) (string, bool) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != "" && !strings.Contains(token, " ")
}

// unanswered reports whether err, the authenticator's, says the API server
// gave no verdict on the token (it could not be reached, it failed, or the
// gateway may not ask), rather than rejecting it: a rejection is a plain
// error with the API server's words, these are its Status or client-go's
// transport errors. The authenticator joins its authenticators' errors in
// an Aggregate, which has no Unwrap.
func unanswered(err error) bool {
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		for _, e := range agg.Errors() {
			if unanswered(e) {
				return true
			}
		}
		return false
	}
	var status apierrors.APIStatus
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &status) || errors.As(err, &ue) || errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, errReviewThrottled)
}

// authorize answers 403 a request whose caller may not do verb to the
// gateway's sandboxes in the request's namespace ({ns} and {name} of the
// route), and 503 one whose authorization could not be checked.
func (g *gate) authorize(verb string, next http.HandlerFunc) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.PathValue("ns"), r.PathValue("name")
		attrs := authorizer.AttributesRecord{
			Verb: verb, Namespace: ns, APIGroup: apiGroup, APIVersion: apiVersion,
			Resource: "sandboxes", Name: name, ResourceRequest: true,
		}
		what := fmt.Sprintf("%s %s.%s in namespace %q", verb, attrs.Resource, apiGroup, ns)
		g.check(w, r, attrs, what, next)
	})
}

// authorizePath is authorize for a path outside the API (/metrics): RBAC's
// nonResourceURLs with verb get.
func (g *gate) authorizePath(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attrs := authorizer.AttributesRecord{Verb: "get", Path: r.URL.Path}
		g.check(w, r, attrs, fmt.Sprintf("get %s", r.URL.Path), next)
	})
}

func (g *gate) check(w http.ResponseWriter, r *http.Request, attrs authorizer.AttributesRecord, what string, next http.Handler) {
	u, ok := request.UserFrom(r.Context())
	if !ok {
		// Only authenticate puts a user there, and it runs first.
		refuse(w, r, g.log, http.StatusUnauthorized, kindUnauthn, "the request is not authenticated", errors.New("no user in the request's context"))
		return
	}
	attrs.User = u
	// The caller's own context bounds the review.
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	decision, reason, err := g.authz.Authorize(ctx, attrs)
	switch {
	case decision == authorizer.DecisionAllow:
		next.ServeHTTP(w, r)
	case err != nil:
		g.throttled(w, r, "the caller's rights could not be checked", fmt.Errorf("authorizing %s: %w", what, err))
	default:
		refuse(w, r, g.log, http.StatusForbidden, kindDenied, fmt.Sprintf("user %q may not %s", u.GetName(), what), fmt.Errorf("%s: %s", what, reason))
	}
}

// userName returns the name of the caller authenticate let in, or "".
func userName(r *http.Request) string {
	if u, ok := request.UserFrom(r.Context()); ok {
		return u.GetName()
	}
	return ""
}
