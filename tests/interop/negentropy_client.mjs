// Runs nostr-tools' NIP-77 Negentropy as the initiator, one JSON line in and out per round, so a Python
// test can answer with our responder and compare every message byte for byte with our own initiator.
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
// nostr-tools does not list nip77 in its package exports; import the module file itself.
const nip77 = pathToFileURL(path.join(here, "node_modules/nostr-tools/lib/esm/nip77.js")).href;
const { Negentropy, NegentropyStorageVector } = await import(nip77);

const rl = createInterface({ input: process.stdin });
const lines = rl[Symbol.asyncIterator]();
const next = async () => JSON.parse((await lines.next()).value);

const setup = await next();
const storage = new NegentropyStorageVector();
for (const [timestamp, id] of setup.items) storage.insert(timestamp, id);
storage.seal();
const neg = new Negentropy(storage, setup.frame);
const have = [];
const need = [];
let msg = neg.initiate();
console.log(JSON.stringify({ msg }));
while (msg !== null) {
  const reply = (await next()).msg;
  msg = neg.reconcile(reply, (id) => have.push(id), (id) => need.push(id));
  console.log(JSON.stringify({ msg, have, need }));
}
rl.close(); // exit once stdout is flushed (process.exit could cut a large last line)
