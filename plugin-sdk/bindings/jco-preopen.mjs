// Preloaded into `jco guest-types` (node --import): jco 1.35.0 reads the WIT
// through preview2-shim, whose 0.26 releases preopen no directory by default,
// so jco cannot read any WIT path. Preopen the filesystem root for this one
// trusted, local tool run. JCO_TRANSPILE: the @bytecodealliance/jco-transpile
// folder jco uses (its own preview2-shim must be the instance configured).
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(`${process.env.JCO_TRANSPILE}/package.json`);
const filesystem = await import(
  pathToFileURL(require.resolve("@bytecodealliance/preview2-shim/filesystem")).href
);
filesystem._setPreopens({ "/": "/" });
