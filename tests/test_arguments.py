"""One syntax for a list of sizes (autogemm/arguments.py): `100,10` and `100 10` in every tool that
takes one, a bad item one line `error: ...` and status 2."""
import argparse
import re

import pytest

from autogemm import arguments, cli
from nn import cost_model, scaling, train
from nn.errors import ArgumentParser, NNError


def parser(unique=False):
    p = ArgumentParser(prog="t")
    p.add_argument("--sizes", **arguments.size_list(train.positive_int, unique=unique), default=(1,))
    p.add_argument("--flag", action="store_true")
    return p


@pytest.mark.parametrize("argv, sizes", [
    (["--sizes", "100,10"], (100, 10)),
    (["--sizes", "100", "10"], (100, 10)),
    (["--sizes", "100,", "10"], (100, 10)),         # typed `100, 10`
    (["--sizes", "100 10"], (100, 10)),             # one word, quoted
    (["--sizes", "100,10", "5", "--flag"], (100, 10, 5)),
    (["--sizes", " 7 "], (7,)),
    (["--sizes", "4", "4"], (4, 4)),                # hidden sizes may repeat
    ([], (1,)),
])
def test_commas_spaces_or_both(argv, sizes):
    assert parser().parse_args(argv).sizes == sizes


def test_unique_keeps_each_size_once_in_the_order_given():
    assert parser(unique=True).parse_args(["--sizes", "4,2", "2", "4,1"]).sizes == (4, 2, 1)


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "100,,10"], "argument --sizes: '100,,10': an empty item; separate the sizes by commas or spaces"),
    (["--sizes", ",10"], "argument --sizes: ',10': an empty item"),
    (["--sizes", ""], "argument --sizes: '': an empty item"),
    (["--sizes", "100,x"], "argument --sizes: 'x' is not an integer"),
    (["--sizes", "100", "0"], "argument --sizes: 0 must be > 0"),
    (["--sizes"], "argument --sizes: expected at least one argument"),
])
def test_a_bad_item_is_an_error(argv, message):
    with pytest.raises(NNError, match="^" + re.escape(message)):
        parser().parse_args(argv)


# ---- every tool that takes a list of sizes ---------------------------------------------------------
def autogemm_args(*argv):
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("commas, spaces", [(["100,10"], ["100", "10"]), (["100,10,", "5"], ["100", "10", "5"])])
def test_both_syntaxes_in_nn_train_and_autogemm(commas, spaces):
    config = lambda *argv: train.resolve(train.build_parser().parse_args(list(argv)))      # noqa: E731
    assert config("--hidden", *commas).hidden == config("--hidden", *spaces).hidden == tuple(map(int, spaces))
    for command in ("tune", "bench", "sweep"):
        shapes = ["--shapes", "nn"] if command == "sweep" else []
        assert (autogemm_args(command, *shapes, "--hidden", *commas).hidden
                == autogemm_args(command, *shapes, "--hidden", *spaces).hidden == tuple(map(int, spaces)))


def test_rank_lists_in_autogemm_tune_nn_scaling_and_nn_cost_model(capsys):
    assert autogemm_args("tune", "--ranks", "1,4").ranks == autogemm_args("tune", "--ranks", "1", "4").ranks == (1, 4)
    assert autogemm_args("tune").ranks == (1,) and autogemm_args("tune").hidden == (1000,)
    for ranks in (["1,2,4"], ["1", "2", "4"], ["4", "1,2", "2"]):
        assert scaling.build_parser().parse_args(["--ranks", *ranks]).ranks in ((1, 2, 4), (4, 1, 2))
    assert scaling.build_parser().parse_args([]).ranks == (1, 2, 4)
    assert cost_model.main(["--ranks", "4", "2"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split(":")[0].strip() for row in rows] == ["4 ranks", "2 ranks"]


@pytest.mark.parametrize("main, argv, message", [
    (cli.main, ["tune", "--hidden", "100,,10"], "argument --hidden: '100,,10': an empty item"),
    (cli.main, ["tune", "--hidden", "100", "x"], "argument --hidden: 'x' is not an integer"),
    (cli.main, ["bench", "--hidden", "0,10"], "argument --hidden: 0 must be >= 1"),
    (cli.main, ["tune", "--ranks", "1", "2000"], "argument --ranks: 2000 is over 1024"),
    (train.main, ["--hidden", "100,,10"], "argument --hidden: '100,,10': an empty item"),
    (train.main, ["--hidden", "100", "1x"], "argument --hidden: '1x' is not an integer"),
    (scaling.main, ["--ranks", "1,,2"], "argument --ranks: '1,,2': an empty item"),
    (cost_model.main, ["--ranks", "2", "x"], "argument --ranks: 'x': give rank counts from 1 to 1024"),
])
def test_a_bad_item_is_one_line_and_status_2_in_every_tool(capsys, main, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_size_list_is_an_argparse_type():
    """A plain argparse parser takes it too: its own error, not ours."""
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--n", **arguments.size_list(int))
    assert p.parse_args(["--n", "1,2", "3"]).n == (1, 2, 3)
