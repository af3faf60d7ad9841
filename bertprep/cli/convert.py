"""`bertprep convert SRC DST --to FORMAT`: the flags of `bertprep.convert` (bertprep/stages/convert.py); a
line per file and one for the whole printed unless --quiet (and one more for a records tree: which of its
formats was read, and the manifest written); --json prints the summary the function returns as JSON."""

from bertprep import formats, storage
from bertprep.stages.convert import ConvertOptions, convert
from bertprep.workdir import MANIFEST


def add_arguments(parser):
    parser.add_argument("src", help="a record file (TFRecord, OFRecord, HDF5, Parquet), or a directory of them "
                        "(format detected)")
    parser.add_argument("dst", help="output file, or directory when SRC is a directory")
    parser.add_argument("--to", required=True, choices=formats.ALL_FORMATS, help="target format")
    parser.add_argument("--quiet", action="store_true", help="no progress and no summary (--json prints the "
                        "summary even then)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")


def options(args) -> ConvertOptions:
    return ConvertOptions(args.src, args.dst, args.to)


def run(args) -> int:
    summary = convert(options(args))
    if args.json:  # the Summary's fields, the object bertprep.convert returns
        summary.print(as_json=True)
    elif not args.quiet:
        for file in summary["files"]:
            print(f"{file['src']} -> {file['dst']}: {file['records']} records")
        print(f"converted {summary['records']} records in {len(summary['files'])} file(s) to {summary['to']}")
        if summary["records_tree_from"]:
            # joined, not pasted after a `/`: `DST/` printed `DST//ofrecord/`; shown without a URL's credentials
            tree, manifest = (storage.display(storage.join(args.dst, name)) for name in (summary["to"], MANIFEST))
            print(f"a records tree: its {summary['records_tree_from']} files converted into {tree}/, {manifest} "
                  "lists them")
        if summary["not_converted"]:
            print(f"not converted ({summary['not_converted_why']}): {', '.join(summary['not_converted'])}")
    return 0
