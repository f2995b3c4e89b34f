// compactd's conformance recorder: regenerates the recorded cases of one Pi version from the
// real Pi, through the oracle scripts in tests/oracle/pi-<version> (installed by
// scripts/pi-oracle). Run it through scripts/record-conformance, which installs the oracle and
// runs this file under the oracle's Node:
//
//   node record.mjs ORACLE_DIR CASES_DIR VERSION [--check] [--case NAME]...
//   node record.mjs ORACLE_DIR CASES_DIR VERSION --new NAME --scenario S --seed N [--scale F]
//                   [--pi16-only] [-- HARNESS_ARGS...]
//
// A case is a folder whose case.json names what to record: the generator's scenario, seed and
// scale, and the harness arguments (the settings Pi ran with). For each case the recorder runs
// the generator (session.jsonl), then Pi's analysis and compaction against the oracle's fake LLM
// (expected.json, llm-requests.json), in a scratch folder.
// - Without --check it writes the three files into the case and points the case's `regenerate`
//   line at this recorder.
// - With --check it writes nothing and compares the three files byte for byte with the recorded
//   ones: exit status 1 and one line per differing file when any differs. This is how the
//   recording is shown to be reproducible (tests/recorder.rs runs it on a few cases).
// - --new makes a case folder with its case.json first, then records it.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [oracleDir, casesDir, version, ...rest] = process.argv.slice(2);
const PI = { "0.85": "0.85.0", "1.6": "1.6.0" }[version];
if (!oracleDir || !casesDir || !PI) {
	console.error("usage: node record.mjs ORACLE_DIR CASES_DIR 0.85|1.6 [--check] [--case NAME]... | --new NAME --scenario S --seed N [--scale F] [--pi16-only] [-- HARNESS_ARGS...]");
	process.exit(2);
}
const RECORDED = ["session.jsonl", "expected.json", "llm-requests.json"];

/** The options: flags, repeated --case, --new's fields, and the harness arguments after `--`. */
function parseOptions(args) {
	const o = { check: false, cases: [], harnessArgs: [] };
	for (let i = 0; i < args.length; i++) {
		const a = args[i];
		const value = () => {
			if (i + 1 >= args.length) throw new Error(`${a} needs a value`);
			return args[++i];
		};
		if (a === "--") {
			o.harnessArgs = args.slice(i + 1);
			break;
		} else if (a === "--check") o.check = true;
		else if (a === "--case") o.cases.push(value());
		else if (a === "--new") o.newCase = value();
		else if (a === "--scenario") o.scenario = value();
		else if (a === "--seed") o.seed = Number(value());
		else if (a === "--scale") o.scale = Number(value());
		else if (a === "--pi16-only") o.pi16Only = true;
		else throw new Error(`unknown option ${a}`);
	}
	return o;
}

/** The command that records `name` again, as its case.json states it. */
function regenerateLine(name) {
	return `bash scripts/record-conformance ${version} --case ${name}`;
}

/** A new case's case.json, with the fields the recorded ones carry for this version. */
function newCaseJson(o) {
	if (!o.scenario || !Number.isInteger(o.seed)) throw new Error("--new needs --scenario and an integer --seed");
	const spec = version === "1.6" ? { pi: PI, scenario: o.scenario, pi16Only: Boolean(o.pi16Only) } : { scenario: o.scenario };
	return { ...spec, seed: o.seed, scale: o.scale ?? 1, harnessArgs: o.harnessArgs, regenerate: regenerateLine(o.newCase) };
}

/** Runs the generator and the harness for `spec` in `work`; returns the folder of the outputs. */
function record(spec, work) {
	const node = process.execPath;
	const run = (script, args) =>
		execFileSync(node, [path.join(oracleDir, script), ...args], { cwd: work, stdio: ["ignore", "ignore", "pipe"] });
	run("gen.mjs", ["--scenario", spec.scenario, "--seed", String(spec.seed), "--scale", String(spec.scale ?? 1), "--out", "session.jsonl"]);
	run("harness.mjs", ["session.jsonl", ...spec.harnessArgs, "--out", "expected.json", "--requests-out", "llm-requests.json"]);
	return work;
}

function main() {
	const o = parseOptions(rest);
	if (o.newCase) {
		const dir = path.join(casesDir, o.newCase);
		if (fs.existsSync(dir)) throw new Error(`${dir} exists already`);
		fs.mkdirSync(dir, { recursive: true });
		fs.writeFileSync(path.join(dir, "case.json"), `${JSON.stringify(newCaseJson(o), null, 1)}\n`);
		o.cases = [o.newCase];
	}
	const names = fs
		.readdirSync(casesDir)
		.filter((n) => fs.existsSync(path.join(casesDir, n, "case.json")))
		.filter((n) => o.cases.length === 0 || o.cases.includes(n))
		.sort();
	const unknown = o.cases.filter((n) => !names.includes(n));
	if (unknown.length > 0) throw new Error(`no case.json for ${unknown.join(", ")} in ${casesDir}`);
	if (names.length === 0) throw new Error(`no cases in ${casesDir}`);

	const differing = [];
	for (const name of names) {
		const dir = path.join(casesDir, name);
		const spec = JSON.parse(fs.readFileSync(path.join(dir, "case.json"), "utf8"));
		const work = fs.mkdtempSync(path.join(os.tmpdir(), "compactd-record-"));
		try {
			record(spec, work);
			for (const file of RECORDED) {
				const made = fs.readFileSync(path.join(work, file));
				if (o.check) {
					const kept = path.join(dir, file);
					if (!fs.existsSync(kept)) differing.push(`${name}/${file}: not recorded`);
					else if (!made.equals(fs.readFileSync(kept))) differing.push(`${name}/${file}: differs from what Pi ${PI} makes now`);
				} else {
					fs.writeFileSync(path.join(dir, file), made);
				}
			}
			if (!o.check && spec.regenerate !== regenerateLine(name)) {
				spec.regenerate = regenerateLine(name);
				fs.writeFileSync(path.join(dir, "case.json"), `${JSON.stringify(spec, null, 1)}\n`);
			}
			console.log(`${o.check ? "checked" : "recorded"} ${name}`);
		} catch (e) {
			const stderr = e.stderr ? `: ${e.stderr.toString().trim()}` : `: ${e.message}`;
			differing.push(`${name}: the oracle failed${stderr}`);
		} finally {
			fs.rmSync(work, { recursive: true, force: true });
		}
	}
	for (const d of differing) console.error(d);
	console.log(`${names.length - new Set(differing.map((d) => d.split(/[/:]/)[0])).size} of ${names.length} cases ${o.check ? "reproduced byte for byte" : "recorded"} with Pi ${PI}`);
	process.exit(differing.length > 0 ? 1 : 0);
}

try {
	main();
} catch (e) {
	console.error(`record: ${e.message}`);
	process.exit(2);
}
