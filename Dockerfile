# Caddy with Token Terminator, built by xcaddy from this checkout.
#
#   docker build -t caddy-token-terminator .
#   docker run -d -p 127.0.0.1:8080:8080 -v tt-data:/data caddy-token-terminator
#
# The vault is in the /data volume (/data/caddy/token-terminator).
ARG CADDY_VERSION=2.11.9

FROM golang:1.26 AS build
ARG CADDY_VERSION
ARG XCADDY_VERSION=v0.4.5
RUN go install github.com/caddyserver/xcaddy/cmd/xcaddy@${XCADDY_VERSION}
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# A published release builds the same way with
#   --with github.com/tokenterminator/caddy-token-terminator@v0.1.0
RUN CGO_ENABLED=0 xcaddy build v${CADDY_VERSION} \
	--with github.com/tokenterminator/caddy-token-terminator=/src \
	--output /usr/bin/caddy
RUN /usr/bin/caddy list-modules | grep -q '^http.handlers.token_terminator$'

FROM caddy:${CADDY_VERSION}
COPY --from=build /usr/bin/caddy /usr/bin/caddy
COPY Caddyfile.example /etc/caddy/Caddyfile
# Inside the container the gateway listens on every interface; publish its
# port on loopback or behind your own front end. The savings page (:8081)
# stays on the container's loopback.
ENV TT_BIND=0.0.0.0
EXPOSE 8080
CMD ["caddy", "run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]
