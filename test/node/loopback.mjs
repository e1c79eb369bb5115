// Preloaded with `node --import ./loopback.mjs <server>`: makes every server that listens on a
// bare port (as the npm MCP servers do) listen on 127.0.0.1 only, so tests never open a port to
// the network.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    const port = Number(args[0]);
    const rest = args.slice(1).filter((a) => typeof a === "function");
    return listen.call(this, { port, host: "127.0.0.1" }, ...rest);
  }
  if (args[0] && typeof args[0] === "object" && !args[0].host && !args[0].path) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
