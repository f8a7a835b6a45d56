package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// file is one entry of an image's only layer: a copy of src, or a symlink to link.
type file struct {
	name, src, link string
}

// image is what an image holds and runs.
type image struct {
	files      []file
	entrypoint []string
	user       string
}

// write builds img as a one-layer linux image of this machine's architecture and writes it to
// path as a docker tarball tagged ref.
func write(path, ref string, img image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	var layerTar bytes.Buffer
	if err := writeLayer(&layerTar, img.files); err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		return err
	}
	cf, err := empty.Image.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: img.entrypoint, User: img.user, WorkingDir: "/",
		Env: []string{"PATH=/bin"}}
	base, err := mutate.ConfigFile(empty.Image, cf)
	if err != nil {
		return err
	}
	out, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, tag, out); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := out.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", path, ref, d)
	return nil
}

// writeLayer writes files, and the directories they are in, as a tar to w.
func writeLayer(w io.Writer, files []file) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0)
	for _, f := range files {
		if dir := path.Dir(f.name); dir != "." && !dirs[dir] {
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: f.name, Linkname: f.link, Mode: 0o777, ModTime: epoch}); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o755, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}
