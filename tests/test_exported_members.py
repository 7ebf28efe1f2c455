"""The public surface is pinned: adding or removing a name is a deliberate change."""

import feedline as fl

EXPECTED = [
    "MAX_DEPTH",
    "ORDERING_VERSION",
    "Batch",
    "BatchMeta",
    "BoundsError",
    "Cursor",
    "Dataset",
    "Field",
    "Index",
    "Loader",
    "LoaderOptions",
    "Mask",
    "Ragged",
    "Range",
    "Record",
    "field",
    "images",
    "loader_workers",
    "DomainError",
    "FeedlineError",
    "FormatError",
    "MissingFileError",
    "Item",
    "Order",
    "OrderError",
    "OrderErrorKind",
    "RecordError",
    "Schedule",
    "ScheduleReason",
    "Seq",
    "ShapeError",
    "StateError",
    "Varying",
    "WorkerError",
    "ndf",
    "nndataset",
    "recfile",
    "remote",
    "salt",
    "sources",
    "text",
]


def test_the_public_names_are_exactly_the_pinned_ones():
    assert sorted(fl.__all__) == sorted(EXPECTED)


def test_every_public_name_exists_and_has_a_docstring():
    for name in fl.__all__:
        obj = getattr(fl, name)
        if callable(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_every_error_is_a_feedline_error_and_its_builtin():
    assert issubclass(fl.OrderError, fl.FeedlineError) and issubclass(fl.OrderError, ValueError)
    assert issubclass(fl.BoundsError, IndexError)
    assert issubclass(fl.RecordError, TypeError)
    assert issubclass(fl.ShapeError, ValueError) and issubclass(fl.DomainError, ValueError)
    assert issubclass(fl.FormatError, ValueError) and issubclass(fl.StateError, ValueError)
    assert issubclass(fl.WorkerError, RuntimeError)


NNDATASET = [
    "LABEL_SIZE",
    "MAGIC",
    "VERSION",
    "VOCAB_MAGIC",
    "VOCAB_VERSION",
    "Build",
    "Info",
    "LazyColumn",
    "Nndataset",
    "TextCorpus",
    "TextDoc",
    "open",
    "parse_nnvocab",
    "sha256_hex",
    "write",
    "write_file_label",
    "write_nnvocab",
]


def test_the_nndataset_names_are_exactly_the_pinned_ones():
    assert sorted(fl.nndataset.__all__) == sorted(NNDATASET)
    for name in NNDATASET:
        assert hasattr(fl.nndataset, name), name


def test_the_ordering_version_is_two():
    # Ordering version 2 follows the dataorder crate 0.4's rules (issue 13).
    assert fl.ORDERING_VERSION == 2


# The public submodules' surfaces, pinned as the package's is (issue 14).
SUBMODULES = {
    "ndf": ["HEADER", "MAGIC", "NdfFile", "open", "record_for", "save", "write_rows"],
    "recfile": ["FORMAT_NAME", "MAGIC", "RecFile", "VERSION", "open", "write", "write_chunks"],
    "text": [
        "BPETokenizer",
        "BuildSummary",
        "ByteTokenizer",
        "CHAT_SPECIALS",
        "ChatTemplate",
        "Input",
        "Packed",
        "Tokenizer",
        "Windows",
        "build",
        "iter_doc_chunks",
        "load_tokenizer",
        "mark_assistant_span",
        "read_text_docs",
        "tokenizer_from_vocab",
        "window_record",
        "write_vocab",
    ],
    "remote": ["RemoteArray", "RemoteFile", "RemoteOptions", "is_url", "open"],
    "images": [
        "DEFAULT_THREADS",
        "IMAGENET_MEAN",
        "IMAGENET_STD",
        "Augment",
        "FolderSummary",
        "Normalize",
        "center_box",
        "class_names",
        "decode",
        "decoded",
        "folder_record",
        "from_folder",
        "from_webdataset",
        "kind_of",
        "random_resized_box",
        "resize",
        "size_of",
    ],
    "torch": ["IterableDataset"],
    "jax": ["batches", "global_batch", "to_jax"],
    "ray": ["build_text", "convert"],
}


def test_the_public_submodules_names_are_exactly_the_pinned_ones():
    for name, expected in SUBMODULES.items():
        module = getattr(fl, name)
        assert sorted(module.__all__) == sorted(expected), name
        for member in expected:
            assert hasattr(module, member), f"fl.{name}.{member}"
