--[[ Pool's gate at submission (docs/SLURM.md): a job that asks for GPUs in a
     partition Pool governs is held (priority 0) until the pool-slurm bridge
     has an admitted claim for it. Written by `pool-slurm job-submit-lua`;
     GOVERNED lists the governed partitions, WAKE the file whose touch wakes
     the bridge at once instead of at its next cycle. ]]

GOVERNED = { @GOVERNED@ }
WAKE = @WAKE@

local function wake_bridge()
   -- a regular file, opened and closed: never blocks slurmctld; a failure changes nothing
   if WAKE ~= nil then
      local f = io.open(WAKE, "w")
      if f ~= nil then
         f:close()
      end
   end
end

local function wants_gpu(job_desc)
   for _, field in ipairs({"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}) do
      local value = job_desc[field]
      if value ~= nil and string.find(value, "gpu", 1, true) then
         return true
      end
   end
   return false
end

local function partition_of(job_desc, part_list)
   if job_desc.partition ~= nil then
      return job_desc.partition
   end
   for name, part in pairs(part_list) do
      if part.flag_default == 1 then
         return part.name or name
      end
   end
   return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local partition = partition_of(job_desc, part_list)
   if partition == nil then
      return slurm.SUCCESS
   end
   for name in string.gmatch(partition, "[^,]+") do
      if GOVERNED[name] and wants_gpu(job_desc) then
         job_desc.priority = 0
         wake_bridge()
         return slurm.SUCCESS
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   -- a held job of a governed partition being released (by pool-slurm, or by hand): wake the
   -- bridge, which holds it again at once unless Pool has admitted it
   local asked = job_desc.priority
   if job_rec.priority == 0 and asked ~= nil and asked ~= 0 and asked ~= (slurm.NO_VAL or 4294967294) then
      for name in string.gmatch(job_rec.partition or "", "[^,]+") do
         if GOVERNED[name] then
            wake_bridge()
            break
         end
      end
   end
   return slurm.SUCCESS
end
