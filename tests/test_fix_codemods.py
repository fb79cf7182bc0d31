"""Each edit of ``tensorgauge fix`` on source fixtures: the diff exact, every other character (comments,
layout, blank lines) kept, and a refusal where the site is not one call."""

import difflib
import textwrap

import pytest

from tensorgauge.edit import codemods
from tensorgauge.edit.codemods import Refused
from tensorgauge.edit.compiled_step import compile_step

pytest.importorskip("libcst")

PIPELINE = textwrap.dedent("""\
    import tensorflow as tf

    # the training data
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.map(decode)  # costly, deterministic
    ds = (
        ds.shuffle(1024)
        .map(augment,
             deterministic=True)   # random flips
        .batch(32)
    )
    model.compile(
        optimizer="adam",
        loss="mse",
        run_eagerly=True,
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    history = model.fit(ds, epochs=3)


    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = model(x)
        grads = tape.gradient(loss, model.trainable_weights)
        return loss
    """)


def changed_lines(before: str, after: str) -> list[str]:
    """The diff's changed lines, without headers."""
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_a_serial_map_gets_num_parallel_calls_and_keeps_its_comment():
    after = codemods.set_keyword(PIPELINE, 5, ("map",), "num_parallel_calls", "tf.data.AUTOTUNE")
    assert changed_lines(PIPELINE, after) == [
        "-ds = ds.map(decode)  # costly, deterministic",
        "+ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)  # costly, deterministic"]


def test_a_keyword_added_to_a_call_over_two_lines_follows_its_layout():
    after = codemods.set_keyword(PIPELINE, 8, ("map",), "num_parallel_calls", "tf.data.AUTOTUNE")
    assert changed_lines(PIPELINE, after) == [
        "-         deterministic=True)   # random flips",
        "+         deterministic=True,",
        "+         num_parallel_calls=tf.data.AUTOTUNE)   # random flips"]


def test_cache_is_chained_right_after_the_map():
    after = codemods.chain_after(PIPELINE, 5, ("map",), "cache")
    assert changed_lines(PIPELINE, after) == [
        "-ds = ds.map(decode)  # costly, deterministic",
        "+ds = ds.map(decode).cache()  # costly, deterministic"]


def test_prefetch_goes_inside_the_parentheses_of_a_chain_written_over_lines():
    after = codemods.chain_after(PIPELINE, 10, ("batch",), "prefetch", "tf.data.AUTOTUNE")
    assert changed_lines(PIPELINE, after) == ["-    .batch(32)", "+    .batch(32).prefetch(tf.data.AUTOTUNE)"]


def test_run_eagerly_removed_from_a_call_with_one_argument_a_line():
    after = codemods.remove_keyword(PIPELINE, 12, ("compile",), "run_eagerly", only="True")
    assert changed_lines(PIPELINE, after) == ["-    run_eagerly=True,"]
    compile(after, "<fixed>", "exec")


def test_jit_compile_removed_from_a_call_on_one_line():
    after = codemods.remove_keyword(PIPELINE, 17, ("compile",), "jit_compile", only="True")
    assert changed_lines(PIPELINE, after) == [
        '-model.compile(optimizer="adam", loss="mse", jit_compile=True)',
        '+model.compile(optimizer="adam", loss="mse")']


def test_steps_per_execution_added_after_a_trailing_comma_keeps_one_argument_a_line():
    after = codemods.set_keyword(PIPELINE, 12, ("compile",), "steps_per_execution", "32")
    assert changed_lines(PIPELINE, after) == ["+    steps_per_execution=32,"]


def test_an_argument_given_already_is_replaced_and_the_same_one_refused():
    source = "model.compile(loss='mse', steps_per_execution=4)\n"
    assert codemods.set_keyword(source, 1, ("compile",), "steps_per_execution", "32") == \
        "model.compile(loss='mse', steps_per_execution=32)\n"
    with pytest.raises(Refused, match="already has steps_per_execution=32"):
        codemods.set_keyword("model.compile(steps_per_execution=32)\n", 1, ("compile",), "steps_per_execution", "32")


def test_prefetch_on_the_dataset_given_to_fit():
    after = codemods.chain_on_argument(PIPELINE, 18, ("fit",), "prefetch", "tf.data.AUTOTUNE")
    assert changed_lines(PIPELINE, after) == ["-history = model.fit(ds, epochs=3)",
                                              "+history = model.fit(ds.prefetch(tf.data.AUTOTUNE), epochs=3)"]
    with pytest.raises(Refused, match="an expression"):
        codemods.chain_on_argument("model.fit(a + b)\n", 1, ("fit",), "prefetch", "tf.data.AUTOTUNE")


def test_the_training_step_is_decorated_nearest_its_def_and_not_twice():
    after = codemods.decorate(PIPELINE, 24, "tf.function", ("tf.function",))
    assert changed_lines(PIPELINE, after) == ["+@tf.function"]
    assert "\n\n\n@tf.function\ndef train_step(x, y):" in after  # the blank lines above the def kept above it
    with pytest.raises(Refused, match="already decorated"):
        codemods.decorate(after, 25, "tf.function", ("tf.function",))
    retracing = codemods.set_decorator_keyword(after, 25, ("tf.function",), "reduce_retracing", "True")
    assert changed_lines(after, retracing) == ["-@tf.function", "+@tf.function(reduce_retracing=True)"]


def test_a_step_outside_any_function_is_refused_with_why():
    with pytest.raises(Refused, match="not inside a function"):
        codemods.decorate("with tape:\n    g = tape.gradient(l, w)\n", 2, "tf.function", ("tf.function",))


def test_predict_becomes_a_direct_call_returning_numpy():
    source = "import numpy as np\nfor frame in frames:\n    action = model.predict(frame[None], verbose=0)  # act\n"
    after = codemods.predict_to_call(source, 3)
    assert changed_lines(source, after) == [
        "-    action = model.predict(frame[None], verbose=0)  # act",
        "+    action = np.asarray(model(frame[None], training=False))  # act"]


def test_a_site_that_is_not_one_call_is_refused():
    with pytest.raises(Refused, match="no call of map"):
        codemods.set_keyword(PIPELINE, 4, ("map",), "num_parallel_calls", "tf.data.AUTOTUNE")
    with pytest.raises(Refused, match="2 calls of map"):
        codemods.chain_after("ds = ds.map(f).map(g)\n", 1, ("map",), "cache")
    with pytest.raises(Refused, match="does not parse"):
        codemods.chain_after("ds = ds.map(f\n", 1, ("map",), "cache")


def test_an_import_is_added_after_the_last_import_only_where_missing():
    source = '"""Doc."""\nimport numpy as np\nimport keras\n\nx = 1\n'
    after, name = codemods.ensure_import(source, "tensorflow", "tf")
    assert name == "tf"
    assert changed_lines(source, after) == ["+import tensorflow as tf"]
    assert after.index("import keras") < after.index("import tensorflow as tf") < after.index("x = 1")
    assert codemods.ensure_import("import tensorflow\n", "tensorflow", "tf") == ("import tensorflow\n", "tensorflow")
    compound = "class Data:\n    pass\n\nimport tensorflow as tf2\n"  # compound statements before it: looked past
    assert codemods.module_alias(compound, "tensorflow") == "tf2"


def test_a_dataloader_gets_workers_kept_across_epochs():
    source = "loader = DataLoader(data, batch_size=64, shuffle=True)\n"
    after = codemods.set_keyword(codemods.set_keyword(source, 1, ("DataLoader",), "num_workers", "2"),
                                 1, ("DataLoader",), "persistent_workers", "True")
    assert after == "loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=2, persistent_workers=True)\n"


INLINE_LOOP = textwrap.dedent("""\
    import tensorflow as tf

    for epoch in range(3):
        for step, (x, y) in enumerate(dataset):
            # the forward pass, recorded
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss_value = loss_fn(y, logits)
            grads = tape.gradient(loss_value, model.trainable_weights)
            optimizer.apply(grads, model.trainable_weights)
            if step % 100 == 0:
                print(float(loss_value))
    """)


def test_a_step_written_inside_the_loop_moves_into_a_compiled_function_before_it():
    after = compile_step(INLINE_LOOP, 9)
    assert after == textwrap.dedent("""\
        import tensorflow as tf


        @tf.function
        def train_step(x, y):
            # the forward pass, recorded
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss_value = loss_fn(y, logits)
            grads = tape.gradient(loss_value, model.trainable_weights)
            optimizer.apply(grads, model.trainable_weights)
            return loss_value


        for epoch in range(3):
            for step, (x, y) in enumerate(dataset):
                loss_value = train_step(x, y)
                if step % 100 == 0:
                    print(float(loss_value))
        """)


def test_a_step_in_its_own_function_is_decorated_and_one_holding_the_loop_is_not():
    own = "def step(x):\n    with tf.GradientTape() as tape:\n        l = model(x)\n    return tape.gradient(l, w)\n" \
          "\nfor x in data:\n    step(x)\n"
    assert compile_step(own, 4).startswith("@tf.function\ndef step(x):")
    main = "def main():\n" + textwrap.indent(INLINE_LOOP.split("\n", 2)[2], "    ")
    after = compile_step(main, 8)
    assert after.startswith("def main():\n\n    @tf.function\n    def train_step(x, y):\n")  # inside main: its locals
    assert "            loss_value = train_step(x, y)\n" in after
    with pytest.raises(Refused, match="in no loop and no function"):
        compile_step("g = tape.gradient(l, w)\n", 1)


def test_clear_session_becomes_the_first_statement_of_the_loop_building_models():
    source = "import keras\n\nfor units in (8, 16):\n    # a fresh model\n    model = build(units)\n    model.fit(x, y)\n"
    after = codemods.first_in_loop(source, 5, "keras.backend.clear_session()")
    assert after == ("import keras\n\nfor units in (8, 16):\n    # a fresh model\n    keras.backend.clear_session()\n"
                     "    model = build(units)\n    model.fit(x, y)\n")
    with pytest.raises(Refused, match="already begins"):
        codemods.first_in_loop(after, 6, "keras.backend.clear_session()")


def test_a_thread_limit_call_is_removed_and_a_block_keeps_a_statement():
    source = ("import tensorflow as tf\n\ntf.config.threading.set_intra_op_parallelism_threads(1)  # speed?\n"
              "if small:\n    tf.config.threading.set_inter_op_parallelism_threads(1)\nx = 1\n")
    after = codemods.remove_call_statement(source, 3, ("set_intra_op_parallelism_threads",))
    assert changed_lines(source, after) == ["-tf.config.threading.set_intra_op_parallelism_threads(1)  # speed?"]
    inner = codemods.remove_call_statement(source, 5, ("set_inter_op_parallelism_threads",))
    assert changed_lines(source, inner) == ["-    tf.config.threading.set_inter_op_parallelism_threads(1)", "+    pass"]
    with pytest.raises(Refused, match="larger statement"):
        codemods.remove_call_statement("n = t.set_intra_op_parallelism_threads(1)\n", 1,
                                       ("set_intra_op_parallelism_threads",))
