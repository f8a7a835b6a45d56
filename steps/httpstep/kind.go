package httpstep

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Limits and defaults.
const (
	// DefaultTimeout bounds one request when the step sets no timeout.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the longest timeout a step may set.
	MaxTimeout = 60 * time.Second
	// MaxBodyBytes bounds a response body; a longer one fails the step.
	MaxBodyBytes = 1 << 20
	// DefaultMaxInFlight bounds the requests running at once.
	DefaultMaxInFlight = 256
	// DefaultInlineWait is how long a reconcile waits for its request before it lets the worker go.
	DefaultInlineWait = 100 * time.Millisecond
	// maxRedirects bounds the redirects an opted-in step follows.
	maxRedirects = 5
	// excerptBytes is how much of a response body a failure message quotes.
	excerptBytes = 256
	// HeaderIdempotencyKey carries a key stable for a run and step.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// VarResponse is the CEL variable successCondition and outputs read the response from.
const VarResponse = "response"

// ResponseType is the type of response: the checker refuses `response.status == 'ok'` (an int
// compared with a string) when the policy is compiled. Header names are lower-case, values of a
// repeated header joined with ", "; the body is parsed JSON when the response is JSON, else text.
var ResponseType = expr.ObjectType("teardown.HTTPResponse", map[string]expr.Type{
	"status": expr.Int, "headers": expr.MapOf(expr.String), "body": expr.Dyn,
})

// Variables implements steps.VariableDeclarer.
func (*Kind) Variables() []string { return []string{VarResponse} }

// Outputs implements steps.OutputDeclarer.
func (*Kind) Outputs(s *v1alpha1.Step) []string {
	return slices.Sorted(maps.Keys(s.HTTP.Outputs))
}

// Options configure the http step kind.
type Options struct {
	// AllowedDestinations are addresses a TeardownPolicy may reach although they are refused by
	// default (loopback, link-local, private ranges, the API server).
	AllowedDestinations []Destination
	// APIServerHosts are the API server's endpoints, refused for TeardownPolicies: URLs
	// ("https://10.0.0.1:6443"), host:port, or hosts alone (then port 443, or 80 for an http URL).
	// An address is refused at its port only; a host name is refused at every port, and its
	// addresses at its port.
	APIServerHosts []string
	// MaxInFlight bounds the requests running at once; more wait for a free slot.
	MaxInFlight int
	// InlineWait is how long a reconcile waits for its request before returning: 0 means
	// DefaultInlineWait, a negative value not at all (every response is taken by the reconcile
	// its arrival wakes).
	InlineWait time.Duration
	// Resolver looks up host names; nil means the system resolver.
	Resolver Resolver
	// UserAgent is sent with every request.
	UserAgent string
	// Transport, when set, carries every request instead of the network: kubectl teardown test
	// answers them from a fixture's script. The checks of the URL still apply; nothing is dialed.
	Transport http.RoundTripper
	// Fence, when set, is checked right before each request is sent: an error (the replica may
	// have lost its leader election lease) fails the request unsent.
	Fence func() error
}

// Kind is the http step kind.
type Kind struct {
	reader     client.Reader
	wake       func(types.NamespacedName)
	guard      *guard
	clients    *clientCache
	calls      *calls
	inlineWait time.Duration
	userAgent  string
	fence      func() error
}

// New returns the http kind. reader reads Secrets and ConfigMaps from the API server (not a
// cache: the operator does not watch them); wake queues a run whose request ended.
func New(reader client.Reader, wake func(types.NamespacedName), opts Options) *Kind {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	switch {
	case opts.InlineWait == 0:
		opts.InlineWait = DefaultInlineWait
	case opts.InlineWait < 0:
		opts.InlineWait = 0
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "teardown-operator"
	}
	g := newGuard(opts)
	return &Kind{
		reader:     reader,
		wake:       wake,
		guard:      g,
		clients:    newClientCache(g, opts.Transport),
		calls:      newCalls(opts.MaxInFlight),
		inlineWait: opts.InlineWait,
		userAgent:  opts.UserAgent,
		fence:      opts.Fence,
	}
}

// Name implements steps.Kind.
func (*Kind) Name() string { return "http" }

// Configured implements steps.Kind.
func (*Kind) Configured(s *v1alpha1.Step) bool { return s.HTTP != nil }

// action is a compiled http step.
type action struct {
	kind       *Kind
	step       string
	namespaced bool
	method     string
	url        *expr.Template
	headers    []header
	body       *expr.Template
	jsonBody   *expr.Program
	timeout    time.Duration
	tls        *tlsSource
	success    *expr.Program
	outputs    map[string]*expr.Program
	poll       time.Duration
	follow     bool
}

// header is a compiled request header.
type header struct {
	name   string
	value  *expr.Template
	secret *keyRef
	// sensitive marks a literal value to redact (Authorization and the like).
	sensitive bool
}

// keyRef is a compiled reference to a key of a Secret or ConfigMap.
type keyRef struct {
	path      string
	namespace *expr.Template
	name, key string
}

type tlsSource struct {
	ca         *keyRef
	caIsSecret bool
	client     *keyRef // key unused: a kubernetes.io/tls Secret's tls.crt and tls.key
}

var (
	outputName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,62}$`)
	// forbiddenHeaders are set by the HTTP client from the request itself.
	forbiddenHeaders = map[string]bool{
		"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
		"Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true,
	}
	// sensitiveHeaders carry credentials; their literal values are redacted like Secret values.
	sensitiveHeaders = map[string]bool{
		"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
		"X-Api-Key": true, "Api-Key": true, "X-Auth-Token": true, "Private-Token": true,
	}
)

// Compile implements steps.Kind.
func (k *Kind) Compile(cc steps.CompileContext, s *v1alpha1.Step, path *field.Path) (steps.Action, field.ErrorList) {
	h := s.HTTP
	p := path.Child("http")
	var errs field.ErrorList
	a := &action{kind: k, step: s.Name, namespaced: cc.Namespaced, method: h.Method, timeout: DefaultTimeout, follow: h.FollowRedirects}
	if a.method == "" {
		a.method = http.MethodGet
	}
	var err error
	errs = append(errs, a.compileURL(cc, h.URL, p.Child("url"))...)
	errs = append(errs, a.compileHeaders(cc, h.Headers, p.Child("headers"))...)
	if h.Body != "" && h.JSONBody != "" {
		errs = append(errs, field.Invalid(p.Child("jsonBody"), h.JSONBody, "set at most one of body or jsonBody"))
	}
	if h.Body != "" {
		if a.body, err = cc.Env.CompileTemplate(h.Body); err != nil {
			errs = append(errs, field.Invalid(p.Child("body"), h.Body, err.Error()))
		}
	}
	if h.JSONBody != "" {
		if a.jsonBody, err = cc.Env.CompileValue(h.JSONBody); err != nil {
			errs = append(errs, field.Invalid(p.Child("jsonBody"), h.JSONBody, err.Error()))
		}
	}
	if h.Timeout != nil {
		if d := h.Timeout.Duration; d <= 0 || d > MaxTimeout {
			errs = append(errs, field.Invalid(p.Child("timeout"), d.String(), fmt.Sprintf("must be more than 0s and at most %s", MaxTimeout)))
		} else {
			a.timeout = d
		}
	}
	if h.TLS != nil {
		errs = append(errs, a.compileTLS(cc, h.TLS, p.Child("tls"))...)
	}
	errs = append(errs, a.compileResponse(cc, h, p)...)
	if h.Poll != nil {
		if h.SuccessCondition == "" {
			errs = append(errs, field.Required(p.Child("successCondition"), "poll needs a successCondition: the step polls while it is false"))
		}
		if a.poll = h.Poll.Interval.Duration; a.poll < time.Second {
			errs = append(errs, field.Invalid(p.Child("poll", "interval"), a.poll.String(), "must be at least 1s"))
		}
	}
	return a, errs
}

// compileResponse compiles successCondition and outputs, over the typed response.
func (a *action) compileResponse(cc steps.CompileContext, h *v1alpha1.HTTPStep, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	respEnv, err := cc.Env.Declare(expr.Var{Name: VarResponse, Type: ResponseType})
	if err != nil {
		return field.ErrorList{field.InternalError(p, err)}
	}
	if h.SuccessCondition != "" {
		if a.success, err = respEnv.CompileCondition(h.SuccessCondition); err != nil {
			errs = append(errs, field.Invalid(p.Child("successCondition"), h.SuccessCondition, err.Error()))
		}
	}
	if len(h.Outputs) > maxOutputs {
		errs = append(errs, field.TooMany(p.Child("outputs"), len(h.Outputs), maxOutputs))
	}
	a.outputs = map[string]*expr.Program{}
	for _, name := range slices.Sorted(maps.Keys(h.Outputs)) {
		src := h.Outputs[name]
		op := p.Child("outputs").Key(name)
		if !outputName.MatchString(name) {
			errs = append(errs, field.Invalid(op, name, "an output name must be a CEL identifier (letters, digits and _, not starting with a digit), at most 63 characters"))
			continue
		}
		if a.outputs[name], err = respEnv.CompileValue(string(src)); err != nil {
			errs = append(errs, field.Invalid(op, string(src), err.Error()))
		}
	}
	return errs
}

// maxOutputs bounds a step's outputs, as the CRD does: each is evaluated on every success.
const maxOutputs = 16

func (a *action) compileTLS(cc steps.CompileContext, t *v1alpha1.HTTPTLS, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	src := &tlsSource{}
	if ca := t.CA; ca != nil {
		cp := path.Child("ca")
		switch {
		case (ca.SecretKeyRef != nil) == (ca.ConfigMapKeyRef != nil):
			errs = append(errs, field.Invalid(cp, "", "set exactly one of secretKeyRef or configMapKeyRef"))
		case ca.SecretKeyRef != nil:
			ref, err := compileRef(cc, cp.Child("secretKeyRef"), ca.SecretKeyRef.Namespace, ca.SecretKeyRef.Name, ca.SecretKeyRef.Key)
			if err != nil {
				errs = append(errs, err)
			}
			src.ca, src.caIsSecret = ref, true
		default:
			ref, err := compileRef(cc, cp.Child("configMapKeyRef"), ca.ConfigMapKeyRef.Namespace, ca.ConfigMapKeyRef.Name, ca.ConfigMapKeyRef.Key)
			if err != nil {
				errs = append(errs, err)
			}
			src.ca = ref
		}
	}
	if cert := t.ClientCertificate; cert != nil {
		ref, err := compileRef(cc, path.Child("clientCertificate"), cert.Namespace, cert.SecretName, "")
		if err != nil {
			errs = append(errs, err)
		}
		src.client = ref
	}
	a.tls = src
	return errs
}

// compileRef checks where a Secret or ConfigMap may be read from: a TeardownPolicy reads only its
// own namespace; a ClusterTeardownPolicy names the namespace, possibly with ${...}.
func compileRef(cc steps.CompileContext, path *field.Path, namespace, name, key string) (*keyRef, *field.Error) {
	ref := &keyRef{path: path.String(), name: name, key: key}
	if cc.Namespaced {
		if namespace != "" && namespace != cc.Namespace {
			return nil, field.Forbidden(path.Child("namespace"), fmt.Sprintf("a TeardownPolicy may read only its own namespace %q", cc.Namespace))
		}
		namespace = cc.Namespace
	} else if namespace == "" {
		return nil, field.Required(path.Child("namespace"), "a ClusterTeardownPolicy must name the namespace, for example ${object.metadata.namespace}")
	}
	t, err := cc.Env.CompileTemplate(namespace)
	if err != nil {
		return nil, field.Invalid(path.Child("namespace"), namespace, err.Error())
	}
	ref.namespace = t
	return ref, nil
}
