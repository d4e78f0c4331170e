// Checks that the grammar knows every word the checker knows: the statement keywords of each
// block, the layer kinds and the names of optimizers, schedules, losses, parallel strategies,
// data sources and generators, compression methods and metrics, read from the checker's own
// tables in src/. A word added to the language without a place in the grammar fails here, with
// the word and the scope it got.
'use strict';

const fs = require('fs');
const path = require('path');
const vsctm = require('vscode-textmate');
const oniguruma = require('vscode-oniguruma');

const src = path.join(__dirname, '..', '..', '..', 'src');
const grammarPath = path.join(__dirname, '..', 'syntaxes', 'kiln.tmLanguage.json');

/** Reads a file of the Rust sources. */
function rust(file) {
  return fs.readFileSync(path.join(src, file), 'utf8');
}

/** The body of `const NAME: ... = &[ ... ];` in `text`, or an error naming what is missing. */
function table(text, name, file) {
  const found = new RegExp(`const ${name}\\b[^=]*=\\s*&\\[`).exec(text);
  if (!found) {
    throw new Error(`no table ${name} in src/${file}`);
  }
  const open = found.index + found[0].length;
  let depth = 1;
  let i = open;
  for (; i < text.length && depth > 0; i += 1) {
    if (text[i] === '[') depth += 1;
    if (text[i] === ']') depth -= 1;
  }
  return text.slice(open, i - 1);
}

/** Every string of a `&[&str]` table. */
function strings(file, name) {
  const words = [...table(rust(file), name, file).matchAll(/"(\w+)"/g)].map((m) => m[1]);
  return nonEmpty(words, `${name} in src/${file}`);
}

/** The first string of each tuple of a table of tuples (`("adam", ...)`). */
function firsts(file, name) {
  const words = [...table(rust(file), name, file).matchAll(/\(\s*"(\w+)"/g)].map((m) => m[1]);
  return nonEmpty(words, `${name} in src/${file}`);
}

function nonEmpty(words, what) {
  if (words.length === 0) {
    throw new Error(`read no words from ${what}`);
  }
  return words;
}

/** The layer kinds' names, from `Kind::name` in src/ir/layer.rs. */
function layerKinds() {
  const words = [...rust('ir/layer.rs').matchAll(/Kind::\w+ => "(\w+)"/g)].map((m) => m[1]);
  return nonEmpty(words, 'Kind::name in src/ir/layer.rs');
}

const statementScopes = ['keyword.control.kiln', 'keyword.other.block.kiln', 'keyword.other.setting.kiln'];

// [words, where they are written, the scopes any of which they must get]
const expectations = [
  [strings('check/experiment.rs', 'KEYWORDS'), 'statement', statementScopes],
  [strings('check/data.rs', 'KEYWORDS'), 'statement', statementScopes],
  [strings('check/settings.rs', 'TRAIN_KEYWORDS'), 'statement', statementScopes],
  [strings('check/compress.rs', 'KEYWORDS'), 'statement', statementScopes],
  [['input', 'block', 'residual', 'extends'], 'statement', statementScopes],
  [layerKinds(), 'statement', ['support.function.layer.kiln']],
  [firsts('check/settings.rs', 'OPTIMIZERS'), 'value', ['support.function.optimizer.kiln']],
  [firsts('check/schedule.rs', 'SCHEDULES'), 'value', ['support.function.schedule.kiln']],
  [firsts('check/loss.rs', 'LOSSES'), 'value', ['support.function.loss.kiln']],
  [firsts('check/settings.rs', 'STRATEGIES'), 'value', ['support.function.strategy.kiln']],
  [strings('check/settings.rs', 'METRICS'), 'value', ['support.constant.metric.kiln']],
  [firsts('check/data.rs', 'SOURCES'), 'value', ['support.function.data.kiln']],
  [firsts('check/data.rs', 'GENERATORS'), 'value', ['support.function.data.kiln']],
  [firsts('check/compress.rs', 'PRUNE_METHODS'), 'value', ['support.function.compress.kiln']],
  [firsts('check/compress.rs', 'QUANT_SCHEMES'), 'value', ['support.function.compress.kiln']],
  [strings('check/compress/schedule.rs', 'SCHEDULES'), 'value', ['support.function.compress.kiln']],
];

async function main() {
  const wasm = fs.readFileSync(path.join(path.dirname(require.resolve('vscode-oniguruma')), 'onig.wasm'));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async () =>
      vsctm.parseRawGrammar(fs.readFileSync(grammarPath, 'utf8'), grammarPath),
  });
  const grammar = await registry.loadGrammar('source.kiln');

  /** The scopes of `word` written at the start of a statement, or as a value. */
  function scopesOf(word, where) {
    const line = where === 'statement' ? `${word}` : `x ${word}`;
    const at = where === 'statement' ? 0 : 2;
    const { tokens } = grammar.tokenizeLine(line, vsctm.INITIAL);
    const token = tokens.find((t) => t.startIndex === at && t.endIndex === at + word.length);
    return token ? token.scopes : [];
  }

  let checked = 0;
  const failures = [];
  for (const [words, where, wanted] of expectations) {
    for (const word of words) {
      checked += 1;
      const scopes = scopesOf(word, where);
      if (!wanted.some((scope) => scopes.includes(scope))) {
        failures.push(`\`${word}\` as a ${where}: wanted ${wanted.join(' or ')}, got ${scopes.join(' ') || 'no token of its own'}`);
      }
    }
  }
  if (failures.length > 0) {
    console.error(`✖ ${failures.length} of ${checked} words of the checker are not in the grammar:`);
    for (const failure of failures) {
      console.error(`  ${failure}`);
    }
    process.exit(1);
  }
  console.log(`✓ the grammar knows all ${checked} words of the checker's tables`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
