// Package image_test checks the operator image that `make image` (hack/image) builds into
// bin/image/: the docker tarball's linux/amd64 image and the OCI layout's index of every platform.
// It reads the real outputs, so run `make image` first (`make test-image` does both): its config,
// its file system (two static binaries, /etc/passwd and /etc/group, no shell), and that the
// binaries it ships run and carry the fallback CA roots.
package image_test
