// Command image builds the teardown-operator container image without a Docker daemon. It
// cross-compiles the operator (/teardown-operator, the entrypoint) and the kubectl plugin
// (/kubectl-teardown, which the Helm chart's pre-delete hook runs) as static binaries for each
// platform, and puts them, with a minimal /etc/passwd and /etc/group naming user 65532 nonroot,
// in one layer on an empty base: no shell, nothing else.
//
// Run it from the repository root (make image does):
//
//	go run ./hack/image [-out bin/image] [-tag ghcr.io/teardown-dev/teardown-operator:dev] [-platforms linux/amd64,linux/arm64]
//
// It writes OUT/teardown-operator.tar, the linux/amd64 image tagged -tag as a tarball that
// `docker load -i` reads, and OUT/oci/, an OCI image layout holding the image index of all the
// platforms (`crane push OUT/oci REF` or `skopeo copy oci:OUT/oci:TAG docker://REF` publish it),
// and prints one line per output with its digest. The build is reproducible: file times and the
// image's creation time are SOURCE_DATE_EPOCH, or the Unix epoch when it is unset.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// options are the program's flags.
type options struct {
	out       string
	tag       name.Tag
	platforms []v1.Platform
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// parseFlags reads and checks the command line.
func parseFlags() (*options, error) {
	out := flag.String("out", "bin/image", "Directory to write teardown-operator.tar and oci/ into.")
	tag := flag.String("tag", "ghcr.io/teardown-dev/teardown-operator:dev", "Tag of the image in the docker tarball; its tag part is also the version label.")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "Comma-separated platforms (os/arch) to build; the tarball holds linux/amd64, or the first one.")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	t, err := name.NewTag(*tag, name.WeakValidation)
	if err != nil {
		return nil, fmt.Errorf("-tag %q: %w", *tag, err)
	}
	o := &options{out: *out, tag: t}
	for _, s := range strings.Split(*platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("-platforms %q: %w", s, err)
		}
		if p.OS != "linux" {
			return nil, fmt.Errorf("-platforms %q: only linux images are built", s)
		}
		o.platforms = append(o.platforms, *p)
	}
	return o, nil
}

func run(ctx context.Context) error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "teardown-image-")
	if err != nil {
		return fmt.Errorf("creating a work directory: %w", err)
	}
	defer os.RemoveAll(work)

	labels := imageLabels(ctx, o.tag)
	images := make([]platformImage, 0, len(o.platforms))
	for _, p := range o.platforms {
		dir := filepath.Join(work, p.OS+"_"+p.Architecture+p.Variant)
		img, err := buildImage(ctx, dir, p, labels, created)
		if err != nil {
			return fmt.Errorf("image for %s: %w", p, err)
		}
		images = append(images, platformImage{platform: p, image: img})
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.out, err)
	}
	tarPath := filepath.Join(o.out, "teardown-operator.tar")
	line, err := writeTarball(tarPath, o.tag, tarballImage(images))
	if err != nil {
		return err
	}
	fmt.Println(line)
	line, err = writeLayout(filepath.Join(o.out, "oci"), o.tag, images)
	if err != nil {
		return err
	}
	fmt.Println(line)
	return nil
}

// buildImage compiles the binaries for p into dir and assembles the image of p.
func buildImage(ctx context.Context, dir string, p v1.Platform, labels map[string]string, created time.Time) (v1.Image, error) {
	bins, err := buildBinaries(ctx, dir, p, labels["org.opencontainers.image.version"])
	if err != nil {
		return nil, err
	}
	layer, err := newLayer(filepath.Join(dir, "layer.tar"), bins, created)
	if err != nil {
		return nil, err
	}
	return newImage(layer, p, labels, created)
}

// tarballImage is the image the docker tarball holds: linux/amd64's, or the first platform's.
func tarballImage(images []platformImage) platformImage {
	for _, pi := range images {
		if pi.platform.OS == "linux" && pi.platform.Architecture == "amd64" {
			return pi
		}
	}
	return images[0]
}
