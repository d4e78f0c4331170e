// Copies every experiment of the repository (experiments/NAME.exp) into test/snap/ as
// NAME.exp.txt, where the snapshot test reads them and keeps their snapshots
// (`NAME.exp.txt.snap`, committed). The copies are named so that `kiln check DIR` and
// `kiln fmt DIR` over the repository do not take them for experiments. The copies
// are not committed: they are made afresh before each run, so the snapshots always check the
// experiments as they are. A snapshot whose experiment is gone is an error, and so is an
// experiment without a snapshot, unless `--update` is given (the snapshots are being rewritten).
'use strict';

const fs = require('fs');
const path = require('path');

const experiments = path.join(__dirname, '..', '..', '..', 'experiments');
const snap = path.join(__dirname, 'snap');

fs.mkdirSync(snap, { recursive: true });
const names = fs.readdirSync(experiments).filter((name) => name.endsWith('.exp'));
if (names.length === 0) {
  console.error(`no .exp files in ${experiments}`);
  process.exit(1);
}
for (const name of fs.readdirSync(snap)) {
  if (name.endsWith('.exp.txt')) {
    fs.rmSync(path.join(snap, name));
  }
}
for (const name of names) {
  fs.copyFileSync(path.join(experiments, name), path.join(snap, `${name}.txt`));
}
const stale = fs
  .readdirSync(snap)
  .filter((name) => name.endsWith('.exp.txt.snap') && !names.includes(name.slice(0, -'.txt.snap'.length)));
if (stale.length > 0) {
  console.error(`snapshots without an experiment (delete them): ${stale.join(', ')}`);
  process.exit(1);
}
const missing = names.filter((name) => !fs.existsSync(path.join(snap, `${name}.txt.snap`)));
if (missing.length > 0 && !process.argv.includes('--update')) {
  console.error(`experiments without a snapshot (run \`npm run test:snap:update\`): ${missing.join(', ')}`);
  process.exit(1);
}
console.log(`copied ${names.length} experiments into test/snap/`);
