# The Trellis image: `trellis controller`, `trellis injector`, and the two containers the injector
# adds to a pod besides Envoy (osm-init runs `trellis iptables-init`, so the image carries iptables;
# osm-healthcheck runs `trellis healthcheck`). Trellis is installed the way test/package.test.ts
# installs it: `npm pack`, then the tarball installed with its runtime dependencies only.
# deploy/*.yaml run `node bin/trellis.js` in /app as uid 65532 (osm-init as uid 0 with NET_ADMIN).
FROM node:20-bookworm-slim AS pack
WORKDIR /src
COPY . .
RUN npm ci --no-audit --no-fund && npm pack --pack-destination /tmp/pack

FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/trellis
COPY --from=pack /tmp/pack/ /tmp/pack/
RUN echo '{"name":"trellis-image","private":true}' > package.json \
 && npm install --no-audit --no-fund --omit=dev /tmp/pack/trellis-*.tgz \
 && rm -rf /tmp/pack /root/.npm \
 && ln -s /opt/trellis/node_modules/trellis /app
WORKDIR /app
USER 65532:65532
ENTRYPOINT ["node", "/app/bin/trellis.js"]
