package framework

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageBinary extracts the file /NAME of the image in the docker tarball (as `make image` writes
// bin/image/teardown-operator.tar) into dir with mode 0755, and returns its path: a test runs the
// binaries the image ships, not ones built anew.
func ImageBinary(tarballPath, name, dir string) (string, error) {
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		return "", fmt.Errorf("reading the image %s (make image writes it): %w", tarballPath, err)
	}
	want := strings.TrimPrefix(path.Clean("/"+name), "/")
	fs := mutate.Extract(img)
	defer fs.Close()
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("the image %s has no /%s", tarballPath, want)
		}
		if err != nil {
			return "", fmt.Errorf("reading the file system of %s: %w", tarballPath, err)
		}
		if h.Typeflag == tar.TypeReg && strings.TrimPrefix(path.Clean("/"+h.Name), "/") == want {
			return writeExecutable(filepath.Join(dir, path.Base(want)), tr)
		}
	}
}

// writeExecutable writes r to the file p, mode 0755.
func writeExecutable(p string, r io.Reader) (string, error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("creating %s: %w", p, err)
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	// OpenFile's mode is masked by the umask, and an existing file keeps its own.
	if err := os.Chmod(p, 0o755); err != nil {
		return "", fmt.Errorf("making %s executable: %w", p, err)
	}
	return p, nil
}
