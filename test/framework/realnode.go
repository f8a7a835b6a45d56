package framework

import "path/filepath"

// RealNodeCluster is the name node-up.sh gives the cluster of the real node by default.
const RealNodeCluster = "teardown-node"

// StartRealNode starts (or reuses) the local cluster with a real node (kubelet and containerd)
// with test/cluster/node-up.sh and returns its kubeconfig path. env adds node-up.sh settings
// ("NODE_IMAGE_ALIASES=...").
func StartRealNode(root string, env ...string) (string, error) {
	return startScript(root, "node-up.sh", RealNodeCluster, env)
}

// StopRealNode removes the real node, its cluster and what they added to the host.
func StopRealNode(root string) error {
	return stopScript(root, "node-down.sh", RealNodeCluster)
}

// RealNodeLogs is the directory of the real node's containerd and kubelet logs.
func RealNodeLogs(root string) string {
	return filepath.Join(root, "bin", "node-logs")
}
