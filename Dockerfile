# lfhttpd container image.
#
#   docker build -t lfhttpd .        (or: make docker; podman needs --format docker
#                                      to keep the HEALTHCHECK)
#   docker run -d --name web -p 8080:8080 lfhttpd
#
# Serve your own site or configuration by mounting it over the image's:
#   docker run -d -p 8080:8080 -v "$PWD/site:/srv/www:ro" lfhttpd
#   docker run -d -p 8080:8080 -v "$PWD/my.conf:/etc/lfhttpd/lfhttpd.conf:ro" lfhttpd
# or pass flags; they are applied on top of /etc/lfhttpd/lfhttpd.conf:
#   docker run -d -p 8080:8080 -v "$PWD/site:/srv/site:ro" lfhttpd -r /srv/site
#   docker run --rm lfhttpd -t             (check the configuration)
#   docker run --rm lfhttpd -V             (version)
# HTTPS: mount a configuration with `listen 8443 ssl;` and the certificate and key it names
# (see conf/examples/tls.conf), and publish that port too:
#   docker run -d -p 8443:8443 -v "$PWD/tls.conf:/etc/lfhttpd/lfhttpd.conf:ro" \
#     -v "$PWD/certs:/etc/lfhttpd/certs:ro" lfhttpd
#
# `docker stop` sends SIGTERM: the server stops accepting, finishes the responses in
# flight and exits 0 within shutdown_timeout (10 s by default). Docker's own stop timeout
# is also 10 s, so give it a little more: `docker run --stop-timeout 15 ...`.

# --- build stage ---------------------------------------------------------------------------
FROM debian:bookworm-slim AS build

# The compiler and the -dev packages of the libraries the server links besides libc:
# zlib, Brotli's encoder and Zstandard (mod_gzip's codings), libmagic (mod_mime),
# libxcrypt (mod_auth's password hashes), OpenSSL 3 (HTTPS), PCRE2 (regex locations and
# server names) and c-ares (the resolver of proxy_pass with variables).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc make libc6-dev zlib1g-dev libbrotli-dev libzstd-dev libmagic-dev libcrypt-dev \
        libssl-dev libpcre2-dev libc-ares-dev \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin

WORKDIR /src
COPY . .
# No -g (the debug info would only be stripped); strip the symbol table as well.
RUN make -j2 build/lfhttpd CFLAGS="-O2" \
 && strip build/lfhttpd \
 && ./build/lfhttpd -V

# --- runtime stage -------------------------------------------------------------------------
FROM debian:bookworm-slim

# Only the runtime libraries (zlib1g, libzstd1 and libcrypt1 are already in the base image,
# named anyway; libmagic1 brings its database, libmagic-mgc). An unprivileged user with a fixed uid/gid, so that mounted
# files can be made readable to it from the host.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        zlib1g libbrotli1 libzstd1 libcrypt1 libmagic1 libmagic-mgc libssl3 libpcre2-8-0 \
        libc-ares2 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
           /var/log/apt /var/log/dpkg.log /var/cache/debconf/*-old \
 && groupadd --system -K SYS_GID_MAX=10001 --gid 10001 lfhttpd \
 && useradd --system -K SYS_UID_MAX=10001 --uid 10001 --gid lfhttpd --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin --no-log-init lfhttpd

COPY --from=build /src/build/lfhttpd /usr/local/bin/lfhttpd
COPY conf/docker.conf /etc/lfhttpd/lfhttpd.conf
COPY www/ /srv/www/
# Owned by root and read-only to the server, whatever the umask of the checkout was.
RUN chmod -R u=rwX,go=rX /etc/lfhttpd /srv/www \
 && /usr/local/bin/lfhttpd -t -c /etc/lfhttpd/lfhttpd.conf

# podman run and docker run add a default PATH when the image has none; `podman kube play`
# and some Kubernetes runtimes do not, and bash's health check needs one.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

USER lfhttpd:lfhttpd
# Relative paths in a configuration or in -r are relative to /srv.
WORKDIR /srv
EXPOSE 8080

# SIGTERM is the graceful shutdown (SIGINT too; a second signal closes what is left).
STOPSIGNAL SIGTERM

# Healthy when the server answers GET / on port 8080 with any 2xx, 3xx or 4xx status (a
# mounted site without an index page answers 403, and is still a working server). The
# image has no curl: bash's /dev/tcp sends the request. If you change the port, override
# it: docker run --health-cmd '...' or --no-healthcheck.
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET / HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && head -c 12 <&3 | grep -q '^HTTP/1\\.[01] [234]'"]

# The configuration file is part of the entrypoint, so arguments given to `docker run`
# are added to it instead of replacing it: `docker run lfhttpd -r /srv/site -n 4`.
# A later -c wins: `docker run lfhttpd -c /srv/conf/other.conf`.
ENTRYPOINT ["/usr/local/bin/lfhttpd", "-c", "/etc/lfhttpd/lfhttpd.conf"]
CMD []
