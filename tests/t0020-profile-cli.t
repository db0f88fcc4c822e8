#!/bin/sh
test_description='arachne-profile: synth writes the shipped profiles, errors and exit codes'
. "$(dirname "$0")/lib.sh"

ARACHNE_PROFILE="$top_builddir/costmodel/arachne-profile"

test_expect_success 'synth --all writes what profiles/layers holds' '
	"$ARACHNE_PROFILE" -q synth --all --out out &&
	diff -r "$AR_PROFILES/layers" out/layers
'

test_expect_success 'synth --model --gpu writes one file and names it' '
	"$ARACHNE_PROFILE" synth --model llama3-8b --gpu h100 --out one >path &&
	echo one/layers/llama3-8b/h100.ini >expect &&
	test_cmp expect path &&
	grep -q "^source = analytic$" one/layers/llama3-8b/h100.ini &&
	test $(ls one/layers/llama3-8b | wc -l) = 1
'

test_expect_success 'synth replaces a file atomically and leaves no temporary' '
	echo junk >one/layers/llama3-8b/h100.ini &&
	"$ARACHNE_PROFILE" -q synth --model llama3-8b --gpu h100 --out one &&
	cmp one/layers/llama3-8b/h100.ini "$AR_PROFILES/layers/llama3-8b/h100.ini" &&
	test $(ls -a one/layers/llama3-8b | wc -l) = 3
'

test_expect_success 'an unknown model is bad input (exit 2) and named' '
	test_expect_code 2 "$ARACHNE_PROFILE" synth --model nope --gpu h100 --out x 2>err &&
	grep -q "unknown model \"nope\"" err
'

test_expect_success 'an unknown GPU is bad input (exit 2) and named' '
	test_expect_code 2 "$ARACHNE_PROFILE" synth --model llama3-8b --gpu b300 --out x 2>err &&
	grep -q "unknown GPU \"b300\"" err
'

test_expect_success 'a broken model file is bad input naming the field' '
	mkdir -p broken/gpus broken/models &&
	cp "$AR_PROFILES/gpus/h100.ini" broken/gpus/ &&
	sed "s/^hidden = 4096 /hidden = lots /" "$AR_PROFILES/models/llama3-8b.ini" >broken/models/llama3-8b.ini &&
	test_expect_code 2 "$ARACHNE_PROFILE" synth --model llama3-8b --all-gpus --profiles broken 2>err &&
	grep -q "hidden" err
'

test_expect_success 'usage errors exit 2' '
	test_expect_code 2 "$ARACHNE_PROFILE" &&
	test_expect_code 2 "$ARACHNE_PROFILE" frob &&
	test_expect_code 2 "$ARACHNE_PROFILE" synth --model llama3-8b &&
	test_expect_code 2 "$ARACHNE_PROFILE" synth --all --model llama3-8b &&
	test_expect_code 2 "$ARACHNE_PROFILE" measure --model llama3-8b --gpu h100 --tp 3
'

test_expect_success 'measure without a GPU fails with the reason (exit 1) and writes nothing' '
	test_expect_code 1 "$ARACHNE_PROFILE" measure --model llama3-8b --gpu h100 --out m 2>err &&
	grep -E -q "no CUDA device|without it" err &&
	! test -e m/layers/llama3-8b/h100.measured.ini
'

test_done
