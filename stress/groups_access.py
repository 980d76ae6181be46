def run(args, table, processes, scratch_dirs):
    pass
