# One image, both roles:
#   pullwatch agent      (DaemonSet: privileged, runAsUser 0, host paths under /host)
#   pullwatch collector  (Deployment: runs as the image's non-root user)
#
# BASE_IMAGE: a supported Node.js LTS on Debian bookworm. The tests build it FROM a base made
# locally from Debian packages plus the machine's own node binary (scripts/test-image.sh).
ARG BASE_IMAGE=node:20-bookworm-slim

# ---- build: all dependencies, TypeScript compile, then drop dev dependencies ------------------
FROM ${BASE_IMAGE} AS build
# better-sqlite3 compiles its addon when no prebuilt binary can be fetched; the Node images ship
# the headers under /usr/local/include/node.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
ENV npm_config_nodedir=/usr/local \
    npm_config_audit=false \
    npm_config_fund=false \
    npm_config_update_notifier=false
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci
COPY tsconfig.json tsconfig.build.json ./
COPY agent ./agent
COPY collector ./collector
COPY common ./common
COPY cli ./cli
COPY bin ./bin
# The image carries the product only (no benchmarks, which build against the test harness).
RUN printf '{"extends":"./tsconfig.build.json","include":["agent","collector","common","cli"]}\n' > tsconfig.image.json \
 && npx tsc -p tsconfig.image.json \
 && npm prune --omit=dev

# ---- runtime: production dependencies, compiled code, the host tools the bundle runs ----------
FROM ${BASE_IMAGE} AS runtime
# journalctl (systemd), nsenter (util-linux), ip/ss (iproute2), iptables, ps/sysctl (procps),
# conntrack, ipset, ethtool, lsmod/modinfo (kmod): what `pullwatch bundle` collects with.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      systemd util-linux iproute2 iptables procps conntrack ipset ethtool kmod ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/*.log \
 && groupadd --system --gid 10001 pullwatch \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin pullwatch
WORKDIR /app
COPY --from=build /src/package.json /src/package-lock.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/bin ./bin
RUN chmod 0755 bin/pullwatch.js \
 && ln -s /app/bin/pullwatch.js /usr/local/bin/pullwatch
ENV NODE_ENV=production \
    PULLWATCH_HOST_ROOT=/host
# The collector runs as this user; the agent DaemonSet overrides it with runAsUser: 0.
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["pullwatch"]
CMD ["--help"]
