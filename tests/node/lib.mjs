// Shared by the scripts tests/system/test_node_sdk.py runs: each named step records what the SDK
// returned (or the error it raised), and the whole record goes to stdout as one JSON object
// for the Python test to check. A step's failure never stops the script: the test names it.
export const [address, restUri] = process.argv.slice(2);

export class Recorder {
  constructor() {
    this.out = {};
  }

  async step(name, fn) {
    try {
      this.out[name] = { ok: true, value: await fn() };
    } catch (e) {
      this.out[name] = { ok: false, error: String(e && e.stack ? e.stack.split('\n')[0] : e) };
    }
    return this.out[name].value;
  }

  print() {
    const json = JSON.stringify(this.out, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
    process.stdout.write(json + '\n');
  }
}
