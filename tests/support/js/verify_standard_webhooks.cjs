// Verifies one request with the official Standard Webhooks library for
// Node (the `standardwebhooks` npm package, installed by scripts/test.sh
// under HOOKFLEET_TEST_NODE_MODULES).
//
// Reads {"secret", "raw", "headers", "body"} as JSON on stdin: `raw` passes
// the secret as its bytes (how a plain, non-whsec_ secret must be given);
// prints "ok", or "refused: <reason>" and exits 1.
const path = require("path");
const { Webhook } = require(path.join(process.env.HOOKFLEET_TEST_NODE_MODULES, "standardwebhooks"));

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const request = JSON.parse(input);
  try {
    const wh = request.raw
      ? new Webhook(new TextEncoder().encode(request.secret), { format: "raw" })
      : new Webhook(request.secret);
    wh.verify(request.body, request.headers);
  } catch (e) {
    console.log(`refused: ${e.message}`);
    process.exit(1);
  }
  console.log("ok");
});
