# The operator image, for builds with a Docker daemon: docker build -t teardown-operator .
#
# Kept equivalent to `make image` (hack/image), which builds the image without a daemon and is
# what CI builds and tests (test/image): the same two static binaries in /, /teardown-operator the
# entrypoint and /kubectl-teardown for the Helm chart's pre-delete hook, run as 65532:65532. The
# base differs: distroless/static also brings a CA bundle, tzdata and /tmp, where make image's
# empty base has none of them (the binaries carry Go's fallback CA roots and need neither).
# This file is not exercised in CI, which has no Docker daemon; change both together. Built for
# another platform with buildx (--platform linux/arm64), it cross-compiles on the build machine.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
# The release, as make image stamps it: the chart's appVersion (docker build --build-arg VERSION=...).
ARG VERSION=0.1.0
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w" -o /out/teardown-operator ./cmd/teardown-operator && \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/teardown-dev/teardown-operator/cli.Version=${VERSION}" -o /out/kubectl-teardown ./cmd/kubectl-teardown

FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.source="https://github.com/teardown-dev/teardown-operator" \
      org.opencontainers.image.title="teardown-operator"
COPY --from=build /out/teardown-operator /out/kubectl-teardown /
USER 65532:65532
ENTRYPOINT ["/teardown-operator"]
