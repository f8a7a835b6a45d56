package metricsauth

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The operator creates both reviews (approval steps also create SubjectAccessReviews).
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// FilterProvider is a controller-runtime metrics server FilterProvider that puts a Guard asking
// the API server of cfg in front of the metrics handler.
func FilterProvider(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	r, err := NewAPIReviewer(cfg, hc)
	if err != nil {
		return nil, err
	}
	g := NewGuard(r, nil)
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return g.Wrap(log, next), nil
	}, nil
}

// APIReviewer is a Reviewer that creates TokenReviews and SubjectAccessReviews.
type APIReviewer struct {
	tokens authenticationclient.TokenReviewInterface
	access authorizationclient.SubjectAccessReviewInterface
}

// NewAPIReviewer returns an APIReviewer for the API server of cfg, through hc.
func NewAPIReviewer(cfg *rest.Config, hc *http.Client) (*APIReviewer, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authorization client: %w", err)
	}
	return &APIReviewer{tokens: authn.TokenReviews(), access: authz.SubjectAccessReviews()}, nil
}

// Authenticate implements Reviewer with a TokenReview for the API server's own audiences.
func (a *APIReviewer) Authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	tr, err := a.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, fmt.Errorf("creating a TokenReview: %w", err)
	}
	if tr.Status.Error != "" && !tr.Status.Authenticated {
		return authenticationv1.UserInfo{}, false, nil // an unknown or expired token: not an error of ours
	}
	return tr.Status.User, tr.Status.Authenticated, nil
}

// Authorize implements Reviewer with a SubjectAccessReview of the non-resource URL.
func (a *APIReviewer) Authorize(ctx context.Context, user authenticationv1.UserInfo, verb, path string) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("creating a SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed, nil
}
