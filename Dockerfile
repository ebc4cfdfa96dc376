# The Trellis image: `trellis controller`, `trellis injector`, and the two containers the injector
# adds to a pod besides Envoy (osm-init runs `trellis iptables-init`, so the image carries iptables;
# osm-healthcheck runs `trellis healthcheck`). Trellis is packed and installed by
# scripts/install-tarball.sh, the script test/package.test.ts runs (npm pack, then the tarball
# installed with its runtime dependencies only); test/package.test.ts also checks that these RUN
# steps are that script's. deploy/*.yaml and charts/trellis run `node bin/trellis.js` in /app as
# uid 65532 (osm-init as uid 0 with NET_ADMIN).
FROM node:20-bookworm-slim AS pack
WORKDIR /src
COPY . .
RUN npm ci --no-audit --no-fund \
 && bash scripts/install-tarball.sh pack /tmp/pack

FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=pack /tmp/pack/ /tmp/pack/
COPY --from=pack /src/scripts/install-tarball.sh /tmp/pack/
RUN bash /tmp/pack/install-tarball.sh install /tmp/pack/trellis-*.tgz /opt/trellis \
 && rm -rf /tmp/pack /root/.npm \
 && ln -s /opt/trellis/node_modules/trellis /app
WORKDIR /app
USER 65532:65532
ENTRYPOINT ["node", "/app/bin/trellis.js"]
