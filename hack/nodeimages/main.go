// Command nodeimages builds the images the local real node needs and cannot pull (it has no
// registry): a pause image for pod sandboxes, from ./pause, and a busybox image for the Job steps
// of the real-node tests, from the host's static busybox (Debian's busybox-static). Each is
// written as a docker tarball that `ctr images import` reads (test/cluster/node-up.sh does).
//
//	go run ./hack/nodeimages [-out bin/node-images] [-busybox /bin/busybox]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The images' names; node-up.sh names PauseImage in containerd's sandbox_image.
const (
	PauseImage   = "teardown.dev/pause:local"
	BusyboxImage = "teardown.dev/busybox:local"
)

func main() {
	out := flag.String("out", "bin/node-images", "Directory to write pause.tar and busybox.tar into.")
	busybox := flag.String("busybox", "/bin/busybox", "A statically linked busybox (Debian's busybox-static).")
	flag.Parse()
	if err := run(context.Background(), *out, *busybox); err != nil {
		fmt.Fprintln(os.Stderr, "nodeimages:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, busybox string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "nodeimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	pause := filepath.Join(work, "pause")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", pause, "./hack/nodeimages/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building pause: %w: %s", err, b)
	}
	if err := write(filepath.Join(out, "pause.tar"), PauseImage, image{
		files:      []file{{name: "pause", src: pause}},
		entrypoint: []string{"/pause"},
		user:       "65535:65535",
	}); err != nil {
		return err
	}

	applets, err := busyboxApplets(ctx, busybox)
	if err != nil {
		return err
	}
	files := []file{{name: "bin/busybox", src: busybox}}
	for _, a := range applets {
		files = append(files, file{name: "bin/" + a, link: "busybox"})
	}
	return write(filepath.Join(out, "busybox.tar"), BusyboxImage, image{
		files:      files,
		entrypoint: []string{"/bin/sh"},
	})
}

// busyboxApplets lists the applets of the busybox at path, after checking that it runs and is
// static (a dynamic one would find no libc in the image).
func busyboxApplets(ctx context.Context, path string) ([]string, error) {
	b, err := exec.CommandContext(ctx, path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w (install Debian's busybox-static)", path, err)
	}
	if ldd, _ := exec.CommandContext(ctx, "ldd", path).CombinedOutput(); !strings.Contains(string(ldd), "not a dynamic executable") {
		return nil, fmt.Errorf("%s is not statically linked (install Debian's busybox-static): %s", path, ldd)
	}
	var applets []string
	for _, a := range strings.Fields(string(b)) {
		if a != "busybox" {
			applets = append(applets, a)
		}
	}
	return applets, nil
}
