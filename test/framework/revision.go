package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PreviousRevision is the release the upgrade specs start from: UPGRADE_FROM (any git revision),
// or the commit before the fault-class work (the parent of the commit that added
// internal/faultinject), the last one whose operator knew nothing of it.
func PreviousRevision(root string) (string, error) {
	if rev := os.Getenv("UPGRADE_FROM"); rev != "" {
		return rev, nil
	}
	out, err := exec.Command("git", "-C", root, "log", "--diff-filter=A", "--format=%H", "-1", "--", "internal/faultinject/doc.go").Output()
	if err != nil {
		return "", fmt.Errorf("reading the history (a clone with its history is needed, or UPGRADE_FROM): %w", err)
	}
	added := strings.TrimSpace(string(out))
	if added == "" {
		return "", fmt.Errorf("no commit added internal/faultinject: a shallow clone? set UPGRADE_FROM")
	}
	return added + "^", nil
}

// Worktree checks revision rev of the repository at root out into dir (a git worktree) and
// returns what removes it.
func Worktree(root, rev, dir string) (remove func(), err error) {
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", dir, rev).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git worktree add %s: %w\n%s", rev, err, out)
	}
	return func() { _ = exec.Command("git", "-C", root, "worktree", "remove", "--force", dir).Run() }, nil
}

// ImportNodeImages imports image tarballs into the real node's containerd
// (test/cluster/node-import.sh); env adds its settings ("NODE_IMAGE_ALIASES=...").
func ImportNodeImages(root string, tarballs []string, env ...string) error {
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "test", "cluster", "node-import.sh")}, tarballs...)...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("test/cluster/node-import.sh: %w\n%s", err, out)
	}
	return nil
}
