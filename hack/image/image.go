package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// platformImage is the image of one platform.
type platformImage struct {
	platform v1.Platform
	image    v1.Image
}

// newImage puts layer on an empty base with the operator's config, as an OCI image of p.
func newImage(layer v1.Layer, p v1.Platform, labels map[string]string, created time.Time) (v1.Image, error) {
	cf, err := empty.Image.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the empty image's config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = v1.Config{
		Entrypoint: []string{"/teardown-operator"},
		User:       strconv.Itoa(nonroot) + ":" + strconv.Itoa(nonroot),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     labels,
	}
	base, err := mutate.ConfigFile(empty.Image, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "go run ./hack/image",
			Comment:   "/teardown-operator, /kubectl-teardown, /etc/passwd, /etc/group",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// writeTarball writes pi's image tagged tag to path as a tarball `docker load` reads, and returns
// the line that reports it.
func writeTarball(path string, tag name.Tag, pi platformImage) (string, error) {
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, pi.image); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	digest, err := pi.image.Digest()
	if err != nil {
		return "", fmt.Errorf("digest of the %s image: %w", pi.platform, err)
	}
	id, err := pi.image.ConfigName()
	if err != nil {
		return "", fmt.Errorf("config digest of the %s image: %w", pi.platform, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %s %s manifest %s, image ID %s, %s", path, tag, pi.platform, digest, id, mib(st.Size())), nil
}

// writeLayout replaces dir with an OCI image layout whose index.json names, by tag, the image
// index of all the images, and returns the line that reports it.
func writeLayout(dir string, tag name.Tag, images []platformImage) (string, error) {
	if filepath.Clean(dir) == "/" || filepath.Clean(dir) == "." {
		return "", fmt.Errorf("refusing to replace %q with the OCI layout", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("removing the old layout %s: %w", dir, err)
	}
	idx, err := imageIndex(images)
	if err != nil {
		return "", err
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", dir, err)
	}
	refs := map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(refs)); err != nil {
		return "", fmt.Errorf("writing %s: %w", dir, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", fmt.Errorf("digest of the index: %w", err)
	}
	parts := make([]string, 0, len(images))
	for _, pi := range images {
		d, err := pi.image.Digest()
		if err != nil {
			return "", fmt.Errorf("digest of the %s image: %w", pi.platform, err)
		}
		parts = append(parts, fmt.Sprintf("%s %s", pi.platform, d))
	}
	return fmt.Sprintf("%s: %s index %s (%s)", dir, tag, digest, strings.Join(parts, ", ")), nil
}

// imageIndex is the OCI image index of the images, annotated like the images are labelled.
func imageIndex(images []platformImage) (v1.ImageIndex, error) {
	adds := make([]mutate.IndexAddendum, 0, len(images))
	var labels map[string]string
	for _, pi := range images {
		cf, err := pi.image.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("config of the %s image: %w", pi.platform, err)
		}
		labels = cf.Config.Labels
		adds = append(adds, mutate.IndexAddendum{
			Add:        pi.image,
			Descriptor: v1.Descriptor{Platform: cf.Platform()},
		})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	annotated, ok := mutate.Annotations(idx, labels).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the index: not an index")
	}
	return annotated, nil
}

// mib prints a size in bytes and MiB.
func mib(n int64) string {
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}
