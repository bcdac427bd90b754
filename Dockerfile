# The engine as a static binary on distroless, run as a non-root user.
#   docker build --build-arg VERSION=1.4.0 -t ghcr.io/abi-engine/engine:1.4.0 .
FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/engine ./cmd/engine

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/engine /engine
# nonroot is uid 65532, the deployment's runAsUser.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/engine"]
