package policy

import "fmt"

// ClusterScopedTarget says why a TeardownPolicy cannot target a cluster-scoped kind: the message
// of its Ready condition (reason InvalidTarget), which kubectl teardown lint repeats word for word.
func ClusterScopedTarget(kind string) string {
	return fmt.Sprintf("%s is cluster-scoped; a TeardownPolicy protects only objects in its own namespace (use a ClusterTeardownPolicy)", kind)
}
