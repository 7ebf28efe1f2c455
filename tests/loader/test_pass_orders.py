"""A loader's pass orders (``_pass_orders.PassOrders``): pass 0's order for a seed dealt
to a shard after a base, the current pass's kept while it lasts, nothing after close."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.loader._pass_orders import PassOrders


def test_a_shards_order_after_a_base_is_the_whole_orders_positions_dealt_to_it():
    seq = fl.Seq.source(100)
    orders = PassOrders(seq, True, None, (1, 3))
    whole = fl.Order(seq.shuffle(5))
    got = orders.order(5, base=10)
    _, recs = got.lookup(np.arange(got.length))
    _, want = whole.lookup(np.arange(10 + 1, 100, 3))
    np.testing.assert_array_equal(recs, want)
    assert orders.length(10) == len(range(11, 100, 3))
    assert orders.order(5, base=10) is got  # kept


def test_the_current_pass_is_the_epochs_order_and_is_kept_while_it_lasts():
    seq = fl.Seq.mix([fl.Seq.source(30).shuffle(1), fl.Seq.source(20)])
    orders = PassOrders(seq, False, None, None)
    first = orders.current(7, 2, 0)
    assert first is orders.current(7, 2, 0)
    want = fl.Order(seq, seed=7).with_epoch(2)
    np.testing.assert_array_equal(first.lookup(np.arange(50))[1], want.lookup(np.arange(50))[1])
    assert orders.current(7, 3, 0) is not first


def test_closed_pass_orders_hold_nothing_and_say_so():
    orders = PassOrders(fl.Seq.source(10), True, (0, 2), None)
    assert fl.Order(orders.split_seq()).length == 5
    orders.current(1, 0, 0)
    orders.close()
    assert orders.seq is None and orders._pass is None and not orders._cache
    with pytest.raises(ValueError, match="closed"):
        orders.order(1)
