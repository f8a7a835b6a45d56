package steps

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Transient reports whether an API server error is likely to go away by itself (a timeout, a
// throttle, a conflict, the network): a kind waits a moment and calls again rather than spend an
// attempt on it.
func Transient(err error) bool {
	var ne net.Error
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		apierrors.IsConflict(err) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
