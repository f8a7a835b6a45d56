package main

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user and group the image runs as, as in distroless's :nonroot images.
const nonroot = 65532

// passwd and group name root and nonroot, so that tools that look the user up find it.
var (
	passwd = fmt.Sprintf("root:x:0:0:root:/:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/:/sbin/nologin\n", nonroot, nonroot)
	group  = fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot)
)

// newLayer writes the layer's tar to path, the binaries (by name in /) and /etc/passwd and
// /etc/group, all owned by root with the time mtime, and returns it as a gzipped OCI layer.
func newLayer(path string, bins map[string]string, mtime time.Time) (v1.Layer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the layer: %w", err)
	}
	err = writeLayerTar(f, bins, mtime)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing the layer %s: %w", path, err)
	}
	l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("reading the layer %s: %w", path, err)
	}
	return l, nil
}

// writeLayerTar writes the layer's entries to w in a fixed order.
func writeLayerTar(w io.Writer, bins map[string]string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	hdr := func(typ byte, name string, mode, size int64) *tar.Header {
		return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: mtime}
	}
	if err := tw.WriteHeader(hdr(tar.TypeDir, "etc/", 0o755, 0)); err != nil {
		return err
	}
	for _, e := range []struct{ name, data string }{{"etc/group", group}, {"etc/passwd", passwd}} {
		if err := tw.WriteHeader(hdr(tar.TypeReg, e.name, 0o644, int64(len(e.data)))); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := addFile(tw, hdr(tar.TypeReg, n, 0o755, 0), bins[n]); err != nil {
			return err
		}
	}
	return tw.Close()
}

// addFile writes the file at path to tw under h, with the file's size.
func addFile(tw *tar.Writer, h *tar.Header, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	h.Size = st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}
